"""Base model for a study: synthetic random weights of a named architecture, or real weights from a path.

Serving speed does not depend on weight values, so a study can run on a model built from an architecture file
(a Hugging Face ``config.json``) with seeded random weights and a BPE tokenizer trained offline. Real weights are
used in place when the config names a path; either way a manifest records what was served.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

from .io import sha256_file, write_json

log = logging.getLogger(__name__)

_WORDS = (
    "robot story long write once upon a time there was small machine that dreamed of the sea and "
    "every morning it walked along the shore counting waves while people from the town asked why "
    "a model serves many adapters on one base with slots batches tokens latency throughput memory"
).split()
CORPUS_WORDS = tuple(_WORDS)  # the synthetic tokenizer's corpus: one token a word (prompts of a given length use them)


def _corpus(seed: int, n_lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(5, 30))) for _ in range(n_lines)]


def train_tokenizer(out_dir: Path, vocab_size: int, seed: int) -> dict[str, Any]:
    """Train a byte-level BPE tokenizer offline and save it in Hugging Face format."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|bos|>", "<|endoftext|>", "<|pad|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|endoftext|>", pad_token="<|pad|>"
    )
    fast.save_pretrained(out_dir)
    return {"vocab_size": tok.get_vocab_size(), "kind": "byte-level BPE, trained offline", "seed": seed}


def build_synthetic(architecture: Path, out_dir: Path, dtype: str, seed: int) -> dict[str, Any]:
    """Build a model with seeded random weights from an architecture file and save it as safetensors."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = json.loads(Path(architecture).read_text())
    model_type = arch.get("model_type")
    if not model_type:
        raise ValueError(f"{architecture}: architecture file lacks 'model_type'")
    config = AutoConfig.for_model(**arch)
    config.dtype = dtype
    torch.manual_seed(seed)
    torch_dtype = getattr(torch, dtype)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("built %s: %s parameters (%s, on %s)", model_type, f"{n_params:,}", dtype, device)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tok_info = train_tokenizer(out_dir, vocab_size=min(int(arch.get("vocab_size", 2048)), 4096), seed=seed)
    return {
        "source": "synthetic",
        "architecture_file": str(architecture),
        "model_type": model_type,
        "architectures": arch.get("architectures", []),
        "dtype": dtype,
        "seed": seed,
        "parameters": n_params,
        "tokenizer": tok_info,
    }


def count_parameters_from_path(path: Path) -> int:
    """Parameter count of saved weights, read from safetensors headers (no tensors are loaded)."""
    from safetensors import safe_open

    total = 0
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors weights found")
    for f in files:
        with safe_open(f, framework="pt") as st:
            for key in st.keys():
                shape = st.get_slice(key).get_shape()
                n = 1
                for d in shape:
                    n *= d
                total += n
    return total


def model_manifest(model_dir: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Describe the served model: config facts, parameter count and file hashes."""
    config = json.loads((model_dir / "config.json").read_text())
    files = {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(model_dir.iterdir())
        if p.is_file()
    }
    params = info.get("parameters") or count_parameters_from_path(model_dir)
    return {
        **info,
        "path": str(model_dir.resolve()),
        "parameters": params,
        "config": {k: config.get(k) for k in sorted(config) if not isinstance(config.get(k), dict)},
        "files": files,
    }


def prepare_model(spec: dict[str, Any], out_dir: Path, manifest_path: Path) -> dict[str, Any]:
    """Build (synthetic) or describe (path) the base model and write its manifest."""
    if spec.get("path"):
        real = Path(spec["path"])
        if not (real / "config.json").exists():
            raise FileNotFoundError(f"model.path: {real} has no config.json")
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        if out_dir.is_symlink():
            out_dir.unlink()
        elif out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.symlink_to(real.resolve(), target_is_directory=True)
        info: dict[str, Any] = {"source": "path", "dtype": spec.get("dtype", "auto")}
    else:
        info = build_synthetic(Path(spec["architecture"]), out_dir, spec["dtype"], int(spec["seed"]))
    manifest = model_manifest(out_dir, info)
    manifest["name"] = spec["name"]
    write_json(manifest_path, manifest)
    return manifest
