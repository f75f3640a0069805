"""Your own adapters: trained PEFT LoRA folders given by path (``adapters.NAME.path``, or a family's folder of
them), checked against the base model before any server starts, copied into the study and described by the same
manifest as a synthetic adapter (so the reports, the claims and the canary treat both alike).

The checks run twice with one function: when the workflow reads the config (against the model's layers as its
architecture config names them, where the model type is a known one, and without loading any tensor) and in the
adapter's own job (against the built model's layers, tensors read). Each error names the adapter's config key and
its folder.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import struct
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .adapters import LINEAR_PATHS, file_digests, linear_shapes, size_figures, write_manifest

log = logging.getLogger(__name__)

CONFIG_FILE = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
# What is copied into the study: the adapter itself and the model card PEFT writes beside it (so a folder saved
# by PEFT records the same files, bytes and sha256 as a synthetic adapter). Training leftovers (optimizer state,
# checkpoints, tokenizer) stay where they are.
COPIED = (CONFIG_FILE, *WEIGHT_FILES, "README.md")
_PEFT_PREFIX = "base_model.model."
_LORA_KEY = re.compile(r"^(?P<module>.+)\.(?P<part>lora_A|lora_B|lora_embedding_A|lora_embedding_B)(?:\.weight)?$")
# Model types whose layer names follow the Llama layout (model.layers.N.self_attn.q_proj, ...mlp.gate_proj): their
# layers are known from the architecture config alone, before the model is built.
_LLAMA_LIKE = {"llama", "mistral", "qwen2", "qwen3"}
_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}


class AdapterError(ValueError):
    """An adapter given by path that cannot be served on the study's model; the message names key and folder."""


@dataclass(frozen=True)
class ModelLayers:
    """The base model's layers an adapter can target: full module name -> (in, out) features, in model order
    (for an embedding: rows, width)."""

    name: str  # the model as the study calls it
    model_type: str
    hidden_size: int
    num_layers: int
    layers: dict[str, tuple[int, int]]
    dtype: str | None = None
    source: str = "built model"  # or "architecture config"

    @classmethod
    def from_config(cls, cfg: dict[str, Any], name: str, dtype: str | None = None) -> ModelLayers | None:
        """The layers of a Llama-layout model from its Hugging Face config.json alone; None for other types."""
        model_type = str(cfg.get("model_type", ""))
        if model_type not in _LLAMA_LIKE:
            return None
        hidden = int(cfg["hidden_size"])
        per_layer = {LINEAR_PATHS[m]: shape for m, shape in linear_shapes(cfg).items()}
        n = int(cfg["num_hidden_layers"])
        layers = {"model.embed_tokens": (int(cfg["vocab_size"]), hidden)}
        layers |= {f"model.layers.{i}.{m}": s for i in range(n) for m, s in per_layer.items()}
        layers["lm_head"] = (hidden, int(cfg["vocab_size"]))
        return cls(name, model_type, hidden, n, layers, dtype or _config_dtype(cfg), "architecture config")

    @classmethod
    def from_model_dir(cls, model_dir: Path, name: str, dtype: str | None = None) -> ModelLayers:
        """The layers of the built model (its config.json instantiated on the meta device: no weights read)."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.from_pretrained(model_dir)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        layers: dict[str, tuple[int, int]] = {}
        for mname, mod in model.named_modules():
            if isinstance(mod, torch.nn.Linear):
                layers[mname] = (mod.in_features, mod.out_features)
            elif isinstance(mod, torch.nn.Embedding):
                layers[mname] = (mod.num_embeddings, mod.embedding_dim)
        raw = json.loads((model_dir / "config.json").read_text())
        text = raw.get("text_config") or raw
        return cls(
            name,
            str(raw.get("model_type", "")),
            int(text.get("hidden_size", 0)),
            int(text.get("num_hidden_layers", 0)),
            layers,
            dtype or _config_dtype(raw),
        )

    def leaf(self, module: str) -> str:
        return module.rsplit(".", 1)[-1]

    def leaves(self) -> list[str]:
        """Leaf names of the layers (q_proj, ...), in model order."""
        return list(dict.fromkeys(self.leaf(m) for m in self.layers))

    def describe(self) -> str:
        return f"{self.name} ({self.model_type}, hidden_size {self.hidden_size}, {self.num_layers} layers)"


def _config_dtype(cfg: dict[str, Any]) -> str | None:
    d = cfg.get("dtype") or cfg.get("torch_dtype")
    return str(d) if d else None


@dataclass
class AdapterFolder:
    """What one adapter folder holds, read: its config, its weights file and (once read) its tensors' shapes."""

    key: str  # config key, for messages
    path: Path
    config: dict[str, Any]
    weights: Path
    shapes: dict[str, tuple[int, ...]] | None = None  # tensor name -> shape; None where not read (.bin at parse)
    dtypes: set[str] = field(default_factory=set)

    def error(self, what: str) -> AdapterError:
        return AdapterError(f"{self.key}: {self.path}: {what}")

    @property
    def where(self) -> str:
        return f"{self.key} ({self.path})"


def read_folder(key: str, path: str | Path) -> AdapterFolder:
    """Read an adapter folder's config and find its weights; the tensors' shapes too where they can be read
    without loading them (safetensors)."""
    folder = Path(path)
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise AdapterError(f"{key}: {folder}: {what} (a relative path is taken from the study's working directory)")
    cfg_file = folder / CONFIG_FILE
    if not cfg_file.is_file():
        raise AdapterError(f"{key}: {folder}: no {CONFIG_FILE} (not a PEFT adapter folder?)")
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AdapterError(f"{key}: {cfg_file}: unreadable: {e}") from None
    if not isinstance(cfg, dict):
        raise AdapterError(f"{key}: {cfg_file}: not a JSON object")
    peft_type = str(cfg.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise AdapterError(f"{key}: {cfg_file}: peft_type is {peft_type}; only LoRA adapters can be served")
    if not isinstance(cfg.get("r"), int) or cfg["r"] < 1:
        raise AdapterError(f"{key}: {cfg_file}: no rank r (a positive integer) in it")
    weights = next((folder / w for w in WEIGHT_FILES if (folder / w).is_file()), None)
    if weights is None:
        raise AdapterError(f"{key}: {folder}: no adapter weights ({' or '.join(WEIGHT_FILES)})")
    found = AdapterFolder(key, folder, cfg, weights)
    if weights.suffix == ".safetensors":
        found.shapes, found.dtypes = _safetensors_header(found)
    return found


def _safetensors_header(found: AdapterFolder) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """Shapes and dtypes from a safetensors file's JSON header (no tensor read, no torch needed)."""
    try:
        with found.weights.open("rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100_000_000:
                raise ValueError(f"header of {n} bytes")
            header = json.loads(f.read(n))
    except (OSError, ValueError, struct.error) as e:
        raise found.error(f"{found.weights.name} is not a readable safetensors file ({e})") from None
    shapes, dtypes = {}, set()
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        shapes[name] = tuple(int(d) for d in meta["shape"])
        dtypes.add(_DTYPES.get(meta["dtype"], meta["dtype"].lower()))
    return shapes, dtypes


def _load_tensors(weights: Path) -> dict[str, Any]:
    import torch

    if weights.suffix == ".safetensors":
        from safetensors.torch import load_file

        return dict(load_file(str(weights)))
    return dict(torch.load(weights, map_location="cpu", weights_only=True))


@dataclass(frozen=True)
class LoraModule:
    """One adapted layer: its name in the base model and the shapes of its two factors."""

    module: str
    a: tuple[int, ...]
    b: tuple[int, ...]

    @property
    def rank(self) -> int:
        return self.a[0]


def lora_modules(found: AdapterFolder) -> dict[str, LoraModule]:
    """The adapted layers of an adapter, from its tensor names (PEFT's ``base_model.model.`` prefix dropped)."""
    parts: dict[str, dict[str, tuple[int, ...]]] = {}
    for name, shape in (found.shapes or {}).items():
        m = _LORA_KEY.match(name)
        if not m:
            continue
        module = m.group("module").removeprefix(_PEFT_PREFIX)
        parts.setdefault(module, {})[m.group("part").replace("embedding_", "")] = shape
    out = {}
    for module, p in parts.items():
        if set(p) != {"lora_A", "lora_B"}:
            raise found.error(f"layer {module} has {sorted(p)} but not both lora_A and lora_B: a damaged adapter")
        out[module] = LoraModule(module, p["lora_A"], p["lora_B"])
    if found.shapes is not None and not out:
        raise found.error(f"{found.weights.name} holds no lora_A/lora_B tensors")
    return out


def _targets_matching(target: str | list[str], layers: Iterable[str]) -> dict[str, list[str]]:
    """PEFT's rule for which layers a ``target_modules`` entry selects: a list entry is a name or the end of one
    (after a dot); a string is a regular expression the whole name must match ('all-linear': every linear)."""
    names = list(layers)
    if isinstance(target, str):
        if target == "all-linear":
            return {target: [n for n in names if n != "lm_head"]}
        return {target: [n for n in names if re.fullmatch(target, n)]}
    return {t: [n for n in names if n == t or n.endswith("." + t)] for t in target}


def check_adapter(found: AdapterFolder, model: ModelLayers | None, max_ranks: dict[str, int]) -> list[str]:
    """Check an adapter against the base model and the servers that load it (``max_ranks``: server id -> its
    max_lora_rank). Raises AdapterError naming what differs; returns notes (what loads but deserves a word)."""
    cfg = found.config
    modules = lora_modules(found)
    rank = max([int(cfg["r"]), *(int(v) for v in (cfg.get("rank_pattern") or {}).values())])
    rank = max([rank, *(m.rank for m in modules.values())])
    for sid, limit in sorted(max_ranks.items()):
        if rank > limit:
            raise found.error(
                f"rank {rank} is above servers.{sid}.max_lora_rank ({limit}): that server would refuse the "
                f"adapter. Raise servers.{sid}.max_lora_rank to {rank} or more, or leave the adapter out of "
                f"servers.{sid}.adapters"
            )
    notes: list[str] = []
    if model is None:
        return notes
    base_name = cfg.get("base_model_name_or_path") or "(not named)"
    made_for = f"adapter_config.json names its base model {base_name!r}; this study's model is {model.describe()}"
    targets = cfg.get("target_modules")
    if targets:
        matched = _targets_matching(targets, model.layers)
        missing = sorted(t for t, hits in matched.items() if not hits)
        if missing:
            raise found.error(
                f"target_modules {missing} name no layer of the base model (its layers: "
                f"{', '.join(model.leaves())}); {made_for}"
            )
    absent = sorted(m for m in modules if m not in model.layers)
    if absent:
        deepest = max((int(x) for m in modules for x in re.findall(r"\.layers\.(\d+)\.", m)), default=-1)
        more = (
            f"; the adapter has layers up to {deepest}, the model {model.num_layers} (0..{model.num_layers - 1})"
            if deepest >= model.num_layers
            else ""
        )
        raise found.error(
            f"{len(absent)} adapted layer(s) the base model lacks (first: {', '.join(absent[:3])}){more}: "
            f"an adapter of another architecture; {made_for}"
        )
    wrong = []
    for m in modules.values():
        n_in, n_out = model.layers[m.module]
        if len(m.a) != 2 or len(m.b) != 2 or m.a[1] != n_in or m.b[0] != n_out or m.b[1] != m.a[0]:
            wrong.append(
                f"{m.module}: lora_A {list(m.a)}, lora_B {list(m.b)} where the model's layer takes {n_in} "
                f"inputs and gives {n_out} outputs (expected [r, {n_in}] and [{n_out}, r])"
            )
    if wrong:
        # the inputs of the layers that take the hidden state: the hidden size the adapter was made for
        seen = Counter(m.a[-1] for m in modules.values() if model.layers[m.module][0] == model.hidden_size)
        common = seen.most_common(1)[0][0] if seen else model.hidden_size
        hidden = f"; most of its layers take {common} inputs, the model's hidden size is {model.hidden_size}"
        hidden = hidden if common != model.hidden_size else ""
        raise found.error(
            f"{len(wrong)} adapted layer(s) of other sizes than the base model's (an adapter of another "
            f"architecture or size{hidden}): {'; '.join(wrong[:2])}; {made_for}"
        )
    if model.dtype and found.dtypes and found.dtypes != {model.dtype}:
        notes.append(
            f"weights are {', '.join(sorted(found.dtypes))}, the model {model.dtype}: the engine casts the "
            "adapter to the model's dtype when it loads it; bytes_on_disk counts the file as stored"
        )
    if cfg.get("base_model_name_or_path") and not _same_model(str(cfg["base_model_name_or_path"]), model.name):
        notes.append(f"{made_for}: the layers' shapes agree, so it loads and computes as on its own base model")
    return notes


def _same_model(named: str, ours: str) -> bool:
    def norm(s: str) -> str:
        return re.sub(r"[^a-z0-9]", "", Path(s.rstrip("/")).name.lower())

    return norm(named) == norm(ours)


def check_b_nonzero(found: AdapterFolder, tensors: dict[str, Any]) -> None:
    """An adapter whose lora_B factors are all zero (PEFT's untrained init) changes nothing: the canary would stop
    every server job serving it, so it stops here, before any server starts."""
    b = [t for n, t in tensors.items() if ".lora_B" in n or ".lora_embedding_B" in n]
    if b and all(not bool(t.any()) for t in b):
        raise found.error(
            "every lora_B weight is zero: the adapter changes nothing (an untrained PEFT init?); a server would "
            "answer exactly as the base model and the canary would stop its job"
        )


def target_order(modules: Iterable[str], model: ModelLayers) -> list[str]:
    """Leaf names of the adapted layers in model order (q_proj, k_proj, v_proj, o_proj, ...), as a synthetic
    adapter lists its targets."""
    leaves = {m.rsplit(".", 1)[-1] for m in modules}
    return [x for x in model.leaves() if x in leaves] + sorted(leaves - set(model.leaves()))


def import_adapter(
    name: str,
    key: str,
    source: Path,
    out_dir: Path,
    model: ModelLayers,
    base_params: int,
    max_ranks: dict[str, int],
) -> dict[str, Any]:
    """Check an adapter folder against the built model, copy it into ``out_dir`` and return its manifest (the
    fields of a synthetic adapter's, plus where it came from)."""
    found = read_folder(key, source)
    try:
        tensors = _load_tensors(found.weights)
    except Exception as e:  # a truncated or foreign file: each loader raises its own kind
        raise found.error(f"{found.weights.name} cannot be read: {e}") from None
    found.shapes = {n: tuple(t.shape) for n, t in tensors.items()}
    found.dtypes = {str(t.dtype).replace("torch.", "") for t in tensors.values()}
    notes = check_adapter(found, model, max_ranks)
    check_b_nonzero(found, tensors)
    for note in notes:
        log.warning("adapter %s: %s", name, note)
    if out_dir.is_symlink() or out_dir.is_file():
        out_dir.unlink()
    elif out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    for f in (CONFIG_FILE, found.weights.name, "README.md"):
        if (found.path / f).is_file():
            shutil.copyfile(found.path / f, out_dir / f)
    left = sorted(p.name for p in found.path.iterdir() if p.name not in COPIED and p.name != "manifest.json")
    if left:
        log.info("adapter %s: not copied (not part of the adapter): %s", name, ", ".join(left))
    files = file_digests(out_dir)
    modules = lora_modules(found)
    trainable = sum(_numel(s) for s in found.shapes.values())
    cfg = found.config
    manifest: dict[str, Any] = {
        "name": name,
        "path": str(out_dir.resolve()),
        "source": "path",
        "source_path": str(found.path.resolve()),
        "rank": int(cfg["r"]),
        "alpha": cfg.get("lora_alpha"),
        "target_modules": target_order(modules, model),
        "seed": None,
        "dtype": ",".join(sorted(found.dtypes)),
        **size_figures(trainable, base_params, files),
        "base_model_name_or_path": cfg.get("base_model_name_or_path"),
        "notes": notes,
    }
    return write_manifest(out_dir, manifest, found.path)


def max_ranks_of(config: dict[str, Any], name: str) -> dict[str, int]:
    """Server id -> max_lora_rank, for the servers that load adapter ``name`` (at start or at run time: with LoRA
    on and the adapter in their ``adapters``, all adapters where none are listed, as config.server_adapters
    reads it) and set a max_lora_rank. Here rather than from config so the adapter's job runs no config code."""
    return {
        sid: int(srv["max_lora_rank"])
        for sid, srv in config["servers"].items()
        if srv.get("lora") and srv.get("max_lora_rank") and name in (srv.get("adapters") or config["adapters"])
    }


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
