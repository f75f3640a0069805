"""PEFT adapter folders for the tests of adapters given by path: a good one for the tiny model of the tests
(config/models/tiny-qwen3.json) and one broken in each way the checks must name. Saved by PEFT itself
(tools/make_adapters.py: deterministic, non-zero weights), then altered where the fault is in the files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tools.make_adapters import TINY, make_adapter

TINY_ARCH: dict[str, Any] = json.loads(TINY.read_text())
GPT2_ARCH: dict[str, Any] = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "n_embd": 64,
    "n_head": 2,
    "n_layer": 2,
    "n_positions": 128,
    "vocab_size": 256,
}
# A Phi-3 of the tiny model's sizes: its attention fuses q, k and v into one layer, qkv_proj, the tiny Qwen3 lacks
PHI3_ARCH: dict[str, Any] = {
    **{k: TINY_ARCH[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size")},
    **{k: TINY_ARCH[k] for k in ("num_attention_heads", "num_key_value_heads", "bos_token_id", "eos_token_id")},
    "architectures": ["Phi3ForCausalLM"],
    "model_type": "phi3",
    "max_position_embeddings": 2048,
    "pad_token_id": 0,
}

# fault -> what the error says about it (besides the adapter's key and folder)
FAULTS = {
    "no-config": "no adapter_config.json",
    "bad-config": "adapter_config.json: unreadable",
    "no-weights": "no adapter weights (adapter_model.safetensors or adapter_model.bin)",
    "targets": "target_modules ['c_attn'] name no layer of the base model",
    "fused-targets": "target_modules ['qkv_proj'] name no layer of the base model",  # o_proj, its other one, does
    "rank": "rank 16 is above servers.lora-2.max_lora_rank (8)",
    "rank-pattern": "rank 16 is above servers.lora-2.max_lora_rank (8)",  # r is 8, o_proj's rank_pattern 16
    "hidden-size": "most of its layers take 128 inputs, the model's hidden size is 256",
    "layers": "the adapter has layers up to 3, the model 2 (0..1): an adapter of another architecture",
}
# Faults seen only once the tensors are read (in the adapter's job)
JOB_FAULTS = {
    "zero-b": "every lora_B weight is zero: the adapter changes nothing",
    "truncated": "adapter_model.safetensors cannot be read",
}


def good(dest: Path, index: int = 1, **kw: Any) -> Path:
    """An adapter for the tiny model: rank 8 on q/k/v/o (as the default synthetic adapter)."""
    return make_adapter(dest, TINY, index=index, **kw)


def broken(fault: str, dest: Path) -> Path:
    """An adapter folder with ``fault`` (a key of FAULTS or JOB_FAULTS)."""
    if fault == "targets":
        return make_adapter(dest, GPT2_ARCH, targets=["c_attn"], base_name="gpt2-tiny")
    if fault == "fused-targets":
        return make_adapter(dest, PHI3_ARCH, targets=["qkv_proj", "o_proj"], base_name="tiny-phi3")
    if fault == "rank":
        return good(dest, rank=16)
    if fault == "rank-pattern":
        return good(dest, rank_pattern={"o_proj": 16})
    if fault == "hidden-size":
        return make_adapter(dest, {**TINY_ARCH, "hidden_size": 128}, base_name="tiny-qwen3-narrow")
    if fault == "layers":
        return make_adapter(dest, {**TINY_ARCH, "num_hidden_layers": 4}, base_name="tiny-qwen3-deep")
    path = good(dest)
    weights = path / "adapter_model.safetensors"
    if fault == "no-config":
        (path / "adapter_config.json").unlink()
    elif fault == "bad-config":
        (path / "adapter_config.json").write_text('{"r": 8, "target_modules": [')
    elif fault == "no-weights":
        weights.unlink()
    elif fault == "truncated":
        data = weights.read_bytes()
        weights.write_bytes(data[: len(data) * 2 // 3])
    elif fault == "zero-b":  # PEFT's untrained init: the adapter changes nothing
        from safetensors.torch import load_file, save_file

        tensors = {n: t.zero_() if ".lora_B" in n else t for n, t in load_file(str(weights)).items()}
        save_file(tensors, str(weights), metadata={"format": "pt"})
    else:
        raise KeyError(fault)
    return path
