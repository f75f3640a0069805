"""Adapters given by path, in their own job (lorabench.own_adapters): checked against the built tiny model before
any server starts, each fault named with the adapter's key and folder; a good one copied and recorded as a
synthetic adapter of the same rank and targets is (no server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lorabench.adapters import build_adapter, lora_parameter_count
from lorabench.io import read_json, verify_manifest_files
from lorabench.model import prepare_model
from lorabench.own_adapters import AdapterError, ModelLayers, import_adapter

from .conftest import ROOT
from .support.adapters import FAULTS, JOB_FAULTS, TINY_ARCH, broken, good

# What a manifest records about the adapter itself (the rest says where it lies or where it came from).
SAME = (
    "rank",
    "alpha",
    "target_modules",
    "dtype",
    "trainable_parameters",
    "base_parameters",
    "share_of_base_pct",
    "bytes_on_disk",
    "bytes_bf16",
    "files",
)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tests' tiny model, built as the model_build rule builds it."""
    out = tmp_path_factory.mktemp("model")
    spec = {"name": "tiny-qwen3", "architecture": str(ROOT / "config/models/tiny-qwen3.json"), "dtype": "bfloat16"}
    return prepare_model({**spec, "seed": 0}, out / "weights", out / "manifest.json")


@pytest.fixture(scope="module")
def layers(model: dict[str, Any]) -> ModelLayers:
    return ModelLayers.from_model_dir(Path(model["path"]), model["name"], model["dtype"])


def run_import(src: Path, out: Path, model: dict[str, Any], layers: ModelLayers, **ranks: int) -> dict[str, Any]:
    return import_adapter("own", "adapters.own", src, out, layers, int(model["parameters"]), ranks)


def test_layers_from_the_architecture_config_are_the_built_models(layers: ModelLayers):
    from_config = ModelLayers.from_config(TINY_ARCH, "tiny-qwen3", "bfloat16")
    assert from_config is not None and from_config.layers == layers.layers
    assert list(from_config.layers) == list(layers.layers)  # model order too
    assert layers.layers["model.layers.1.self_attn.k_proj"] == (256, 128)


def test_a_folder_saved_by_peft_records_what_the_synthetic_adapter_records(
    tmp_path: Path, model: dict[str, Any], layers: ModelLayers
):
    spec = {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
    synthetic = build_adapter(
        Path(model["path"]), "a", {**spec, "init_lora_b_std": 0.02, "seed": 1}, tmp_path / "a", model["parameters"]
    )
    own = run_import(tmp_path / "a", tmp_path / "results" / "own", model, layers, **{"lora-2": 8})
    assert {k: own[k] for k in SAME} == {k: synthetic[k] for k in SAME}
    assert own["trainable_parameters"] == lora_parameter_count(TINY_ARCH, 8, spec["target_modules"]) == 28_672
    assert sorted(own["files"]) == ["README.md", "adapter_config.json", "adapter_model.safetensors"]
    assert (own["source"], own["source_path"], own["seed"]) == ("path", str((tmp_path / "a").resolve()), None)
    # Served from the study's own copy, which the server job checks against the manifest as a synthetic one.
    assert own["path"] == str((tmp_path / "results" / "own").resolve())
    assert read_json(tmp_path / "results" / "own" / "manifest.json") == own
    verify_manifest_files(own, "adapter own")


def test_an_adapter_made_with_peft_elsewhere_is_counted_from_its_tensors(
    tmp_path: Path, model: dict[str, Any], layers: ModelLayers
):
    src = good(tmp_path / "src", rank=4, targets=["q_proj", "v_proj", "gate_proj", "down_proj"])
    (src / "optimizer.pt").write_bytes(b"training leftovers")
    m = run_import(src, tmp_path / "own", model, layers)
    targets = ["q_proj", "v_proj", "gate_proj", "down_proj"]
    assert m["target_modules"] == targets  # model order, whatever order adapter_config.json keeps
    assert m["trainable_parameters"] == lora_parameter_count(TINY_ARCH, 4, targets)
    assert (m["rank"], m["alpha"], m["base_model_name_or_path"]) == (4, 16, "tiny-qwen3")
    assert "optimizer.pt" not in m["files"] and not (tmp_path / "own" / "optimizer.pt").exists()
    # float32 weights on a bfloat16 model: loads (the engine casts it), and the manifest says so
    assert m["dtype"] == "float32" and any("casts the adapter to the model's dtype" in n for n in m["notes"])


def test_bin_weights_and_matching_dtype(tmp_path: Path, model: dict[str, Any], layers: ModelLayers):
    import torch
    from safetensors.torch import load_file

    src = good(tmp_path / "src")
    tensors = {n: t.to(torch.bfloat16) for n, t in load_file(str(src / "adapter_model.safetensors")).items()}
    (src / "adapter_model.safetensors").unlink()
    torch.save(tensors, src / "adapter_model.bin")
    m = run_import(src, tmp_path / "own", model, layers)
    assert "adapter_model.bin" in m["files"] and m["dtype"] == "bfloat16"
    assert m["notes"] == [] and m["trainable_parameters"] == 28_672


def test_another_base_model_of_the_same_shape_is_noted(tmp_path: Path, model: dict[str, Any], layers: ModelLayers):
    src = good(tmp_path / "src")
    cfg = json.loads((src / "adapter_config.json").read_text())
    (src / "adapter_config.json").write_text(json.dumps({**cfg, "base_model_name_or_path": "Qwen/Qwen3-1.7B"}))
    notes = run_import(src, tmp_path / "own", model, layers)["notes"]
    assert any("names its base model 'Qwen/Qwen3-1.7B'; this study's model is tiny-qwen3" in n for n in notes)


@pytest.mark.parametrize("fault", [*FAULTS, *JOB_FAULTS])
def test_each_fault_stops_the_job_naming_key_and_folder(
    fault: str, tmp_path: Path, model: dict[str, Any], layers: ModelLayers
):
    src = broken(fault, tmp_path / "src")
    with pytest.raises(AdapterError) as e:
        run_import(src, tmp_path / "own", model, layers, **{"lora-2": 8, "lora-4": 64})
    msg = str(e.value)
    assert msg.startswith(f"adapters.own: {src}"), msg
    expected = {**FAULTS, **JOB_FAULTS}[fault]
    assert expected in msg, msg
    assert not (tmp_path / "own").exists()  # nothing copied, no manifest: no partial result
    # what the adapter was made for, beside the study's model
    if fault in ("targets", "fused-targets", "hidden-size", "layers"):
        assert "this study's model is tiny-qwen3 (qwen3, hidden_size 256, 2 layers)" in msg, msg


def test_the_same_synthetic_adapter_is_the_same_bytes_in_every_build(tmp_path: Path, model: dict[str, Any]):
    # PEFT writes target_modules in the order of the run's string hashes: two builds of one adapter on the H200
    # (2026-12-03) differed in adapter_config.json alone. Built here under two hash seeds, in fresh interpreters.
    import os
    import subprocess
    import sys

    spec = {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
            "init_lora_b_std": 0.02, "seed": 1}  # fmt: skip
    code = (
        "import json, sys; from pathlib import Path; from lorabench.adapters import build_adapter; "
        "m = build_adapter(Path(sys.argv[1]), 'a', json.loads(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])); "
        "print(json.dumps(m['files']))"
    )
    files = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        args = [model["path"], json.dumps(spec), str(tmp_path / seed), str(model["parameters"])]
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
        files.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert files[0] == files[1]
    cfg = json.loads((tmp_path / "1" / "adapter_config.json").read_text())
    assert cfg["target_modules"] == ["k_proj", "o_proj", "q_proj", "v_proj"]
