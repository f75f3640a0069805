"""LoRA adapters built with PEFT: rank, alpha, target modules, lora_B init, seed; with a manifest.

The manifest records what a reader needs to compare with published figures: trainable parameters, their share
of the base model, bytes on disk and the sha256 of every file.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .io import read_json, sha256_file, write_json

log = logging.getLogger(__name__)


# Where each linear of a Llama-layout decoder layer sits (its module path within the layer).
LINEAR_PATHS = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
                "o_proj": "self_attn.o_proj", "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
                "down_proj": "mlp.down_proj"}  # fmt: skip


def linear_shapes(model_config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear of a decoder layer of a Llama-layout model, from its config alone."""
    hidden = int(model_config["hidden_size"])
    heads = int(model_config["num_attention_heads"])
    kv_heads = int(model_config.get("num_key_value_heads") or heads)
    head_dim = int(model_config.get("head_dim") or hidden // heads)
    inter = int(model_config.get("intermediate_size", 0))
    return {
        "q_proj": (hidden, heads * head_dim),
        "k_proj": (hidden, kv_heads * head_dim),
        "v_proj": (hidden, kv_heads * head_dim),
        "o_proj": (heads * head_dim, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }


def lora_parameter_count(model_config: dict[str, Any], rank: int, target_modules: list[str]) -> int:
    """Trainable LoRA parameters computed from a model config alone: r * (in + out) per targeted linear."""
    shapes = linear_shapes(model_config)
    unknown = [m for m in target_modules if m not in shapes]
    if unknown:
        raise ValueError(f"target_modules: no shape known for {unknown}")
    per_layer = sum(rank * (shapes[m][0] + shapes[m][1]) for m in target_modules)
    return per_layer * int(model_config["num_hidden_layers"])


def build_adapter(model_dir: Path, name: str, spec: dict[str, Any], out_dir: Path, base_params: int) -> dict[str, Any]:
    """Create one PEFT LoRA adapter with seeded random weights and return its manifest."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(int(spec["seed"]))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto")
    cfg = LoraConfig(
        r=int(spec["rank"]),
        lora_alpha=int(spec["alpha"]),
        target_modules=list(spec["target_modules"]),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, cfg)
    std = float(spec["init_lora_b_std"])
    gen = torch.Generator().manual_seed(int(spec["seed"]))
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if "lora_B" in pname:
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype) * std)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    out_dir.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out_dir), safe_serialization=True)
    stable_adapter_config(out_dir / "adapter_config.json")
    files = file_digests(out_dir)
    dtype = str(next(p for n, p in peft_model.named_parameters() if "lora_A" in n).dtype).replace("torch.", "")
    manifest: dict[str, Any] = {
        "name": name,
        "path": str(out_dir.resolve()),
        "rank": int(spec["rank"]),
        "alpha": int(spec["alpha"]),
        "target_modules": list(spec["target_modules"]),
        "init_lora_b_std": std,
        "seed": int(spec["seed"]),
        "dtype": dtype,
        **size_figures(trainable, base_params, files),
    }
    return write_manifest(out_dir, manifest)


def stable_adapter_config(path: Path) -> None:
    """PEFT keeps target_modules as a set and writes it in the order of that run's string hashes, so the same
    adapter's adapter_config.json differed between builds (and its sha256 in the manifest). Written again with the
    list sorted (``io.write_json``: PEFT's indent and key order); engines read the modules as a set."""
    cfg = read_json(path)
    if isinstance(cfg.get("target_modules"), list):
        cfg["target_modules"] = sorted(cfg["target_modules"])
    write_json(path, cfg)


def file_digests(folder: Path) -> dict[str, dict[str, Any]]:
    """An adapter folder's files (its manifest left out): name -> bytes and sha256."""
    return {
        p.name: {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != "manifest.json"
    }


def size_figures(trainable: int, base_params: int, files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """An adapter manifest's sizes: parameters (and their share of the base model's), bytes on disk and in bf16,
    and its files."""
    return {
        "trainable_parameters": trainable,
        "base_parameters": base_params,
        "share_of_base_pct": 100.0 * trainable / base_params,
        "bytes_on_disk": sum(f["bytes"] for f in files.values()),
        "bytes_bf16": 2 * trainable,
        "files": files,
    }


def write_manifest(out_dir: Path, manifest: dict[str, Any], source: Path | None = None) -> dict[str, Any]:
    """Log an adapter's figures (and where it came from, for one given by path), write its manifest.json."""
    log.info(
        "adapter %s%s: rank %d on %s, %s trainable parameters (%.3f%% of base), %s bytes on disk",
        manifest["name"],
        f" from {source}" if source else "",
        manifest["rank"],
        ",".join(manifest["target_modules"]),
        f"{manifest['trainable_parameters']:,}",
        manifest["share_of_base_pct"],
        f"{manifest['bytes_on_disk']:,}",
    )
    write_json(out_dir / "manifest.json", manifest)
    return manifest
