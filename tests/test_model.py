"""Base model: synthetic weights of a named architecture, and real weights from a path (linked, counted)."""

from __future__ import annotations

from pathlib import Path

from lorabench.adapters import lora_parameter_count
from lorabench.io import read_json
from lorabench.model import prepare_model

from .conftest import ROOT


def test_synthetic_then_path(tmp_path: Path):
    arch = ROOT / "config" / "models" / "tiny-qwen3.json"
    synth = prepare_model(
        {"name": "t", "architecture": str(arch), "dtype": "bfloat16", "seed": 0},
        tmp_path / "synthetic",
        tmp_path / "synthetic.json",
    )
    assert synth["source"] == "synthetic" and synth["parameters"] == 1_705_472
    assert (tmp_path / "synthetic" / "tokenizer.json").exists()
    real = prepare_model(
        {"name": "t", "path": str(tmp_path / "synthetic")}, tmp_path / "weights", tmp_path / "real.json"
    )
    assert (tmp_path / "weights").is_symlink()
    assert real["source"] == "path" and real["parameters"] == synth["parameters"]  # counted from safetensors headers
    assert read_json(tmp_path / "real.json")["files"]["model.safetensors"]["sha256"]


def test_lora_parameter_count_of_the_source_model():
    import json

    cfg = json.loads((ROOT / "config" / "models" / "qwen3-1.7b.json").read_text())
    assert lora_parameter_count(cfg, 8, ["q_proj", "k_proj", "v_proj", "o_proj"]) == 3_211_264
    assert lora_parameter_count(cfg, 16, ["q_proj", "k_proj", "v_proj", "o_proj"]) == 6_422_528
