"""Adapters given by path in the config (lorabench.adapter_paths): mixed with synthetic ones, families of them,
bad keys named, and each fault that can be seen without building the model stopping the workflow as it reads the
config, naming the adapter's key and folder (no server, no job); the own-adapters study's adapters by path under
its dataset workload, paired within it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from lorabench.adapter_paths import check_adapter_folders, source_files
from lorabench.config import ConfigError
from lorabench.job import server_job
from lorabench.loadgen.traffic import context_limits, dataset_files
from lorabench.loadgen.workload import build_request_set
from lorabench.measure.cycles import Progress
from lorabench.roles import role_conditions

from .conftest import ROOT
from .support.adapters import FAULTS, broken, good
from .test_config import DEFAULT, check, snakemake_dry_run


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding two good adapters, support and legal."""
    root = tmp_path_factory.mktemp("own")
    good(root / "support", index=1)
    good(root / "legal", index=2)
    return root


def mixed(own: Path) -> dict[str, Any]:
    """The default study with adapter support given by path beside the synthetic a, b, c."""
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapters"]["support"] = {"path": str(own / "support")}
    cfg["conditions"]["a-support"] = {"adapters": ["a", "support"]}
    cfg["servers"]["lora-4"]["conditions"].append("a-support")
    return cfg


def test_path_and_synthetic_adapters_mix(two: Path):
    cfg = check(mixed(two))
    check_adapter_folders(cfg)
    assert cfg["adapters"]["support"] == {"path": str(two / "support")}  # no synthetic defaults filled in
    assert cfg["adapters"]["a"]["init_lora_b_std"] == 0.02
    assert source_files(cfg, "support") == [
        str(two / "support" / "adapter_config.json"),
        str(two / "support" / "adapter_model.safetensors"),
    ]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"path": "x", "rank": 8}, "unknown key(s): adapters.own.rank"),
        ({"path": "x", "alpha": 32}, "unknown key(s): adapters.own.alpha"),
        ({"pth": "x"}, "unknown key(s): adapters.own.pth"),
        ({"path": 3}, "adapters.own.path: 3 is not of type 'string'"),
    ],
)
def test_a_bad_adapter_entry_is_named(entry: dict[str, Any], expected: str):
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapters"]["own"] = entry
    with pytest.raises(ConfigError) as e:
        check(cfg)
    assert expected in str(e.value)


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_stops_the_config_naming_key_and_folder(fault: str, tmp_path: Path, two: Path):
    cfg = mixed(two)
    cfg["adapters"]["own"] = {"path": str(broken(fault, tmp_path / fault))}
    cfg["servers"]["lora-4"]["max_lora_rank"] = 64  # only lora-2 is too small for the rank-16 adapter
    cfg = check(cfg)
    with pytest.raises(ConfigError) as e:
        check_adapter_folders(cfg)
    msg = str(e.value)
    assert f"adapters.own: {tmp_path / fault}" in msg and FAULTS[fault] in msg, msg
    assert "adapters.support" not in msg  # the good one is not blamed


def test_a_missing_folder_is_named(two: Path):
    cfg = check(mixed(two))
    cfg["adapters"]["support"]["path"] = "no/such/adapter"
    with pytest.raises(ConfigError, match=r"adapters\.support: no/such/adapter: does not exist"):
        check_adapter_folders(cfg)


def test_family_of_adapters_given_by_path(two: Path, tmp_path: Path):
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapter_families"] = {"own": {"path": str(two)}}
    cfg["conditions"]["own2"] = {"family": {"name": "own", "count": 2}, "assignment": "uniform"}
    cfg["servers"]["lora-4"]["conditions"].append("own2")
    cfg = check(cfg)
    check_adapter_folders(cfg)
    # members in the order of their folders' names, named as a synthetic family's members
    assert cfg["adapters"]["own-000"] == {"path": str(two / "legal")}
    assert cfg["adapters"]["own-001"] == {"path": str(two / "support")}
    assert cfg["conditions"]["own2"]["adapters"] == ["own-000", "own-001"]
    again = check(copy.deepcopy(cfg))  # expanding an expanded config changes nothing
    assert again["adapters"] == cfg["adapters"] and again["conditions"] == cfg["conditions"]

    fam = tmp_path / "fam"
    good(fam / "x1")
    broken("no-weights", fam / "x2")
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapter_families"] = {"own": {"path": str(fam)}}
    with pytest.raises(ConfigError, match=rf"adapter_families\.own \(member own-001\): {fam / 'x2'}: no adapter"):
        check_adapter_folders(check(cfg))


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        ({"path": "{two}", "count": 3}, "adapter_families.own.count: 3 is more than the 2 adapter folders"),
        ({"path": "{two}/nowhere"}, "adapter_families.own.path: {two}/nowhere is not a folder"),
        ({"path": "{two}", "rank": 8}, "unknown key(s): adapter_families.own.rank"),
    ],
)
def test_family_errors_name_the_key(family: dict[str, Any], expected: str, two: Path):
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapter_families"] = {"own": {k: v.format(two=two) if isinstance(v, str) else v for k, v in family.items()}}
    with pytest.raises(ConfigError) as e:
        check(cfg)
    assert expected.format(two=two) in str(e.value)


def test_snakemake_stops_before_any_job(tmp_path: Path, two: Path):
    cfg = mixed(two)
    cfg["adapters"]["own"] = {"path": str(broken("rank", tmp_path / "big"))}
    proc = snakemake_dry_run(cfg, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"adapters.own: {tmp_path / 'big'}: rank 16 is above servers.lora-2.max_lora_rank (8)" in out, out
    assert "Job stats" not in proc.stdout


def test_the_own_adapters_study_serves_both_under_its_dataset_workload(two: Path, tmp_path: Path):
    from lorabench.loadgen.prompts import HfTokenizer
    from lorabench.model import train_tokenizer

    study = yaml.safe_load((ROOT / "config/studies/own-adapters-cpu.yaml").read_text())
    for name in ("support", "legal"):  # the study's own-adapters/NAME, made here
        assert study["adapters"][name] == {"path": f"own-adapters/{name}"}
        study["adapters"][name]["path"] = str(two / name)
    cfg = check(study)
    check_adapter_folders(cfg)
    assert dataset_files(cfg) == ["tests/fixtures/chat-small.jsonl"]
    chat = sorted(c for c, v in cfg["conditions"].items() if v.get("workload") == "chat")
    assert chat == ["chat-base", "chat-legal", "chat-support", "chat-support-legal"]
    train_tokenizer(tmp_path / "tok", vocab_size=2048, seed=0)  # as model_build trains the synthetic model's
    rset = build_request_set(
        cfg["workload"],
        cfg["conditions"],
        cfg["bursts"],
        workloads=cfg["workloads"],
        counter=HfTokenizer(tmp_path / "tok"),
        limits=context_limits(cfg),
    )
    prompts = rset["prompts"]
    sets = {c: rset["sets"][f"{c}/4"] for c in chat}
    # every chat condition sends the same dataset lines (prompts of several lengths, their own output lengths)
    shapes = {c: [(r["prompt"], r["max_tokens"]) for r in rows] for c, rows in sets.items()}
    assert len({tuple(v) for v in shapes.values()}) == 1, shapes
    lines = [prompts[p] for p, _ in shapes["chat-base"]]
    assert all(p["source"].startswith("tests/fixtures/chat-small.jsonl:") for p in lines)
    assert len({p["tokens"] for p in lines}) > 1 and len({m for _, m in shapes["chat-base"]}) > 1
    assert [r["adapter"] for r in sets["chat-support-legal"]] == ["support", "legal", "support", "legal"]
    assert rset["workloads"]["chat"]["conditions"] == chat
    # each chat condition is compared with the base model under the same requests, never with the fixed prompt's
    job = server_job(cfg, "lora-4", "cpu")
    assert job.reference == "base" and job.references == dict.fromkeys(chat, "chat-base")
    progress = Progress(job.reference, job.conditions, job.bursts, job.references)
    assert {c: d for (c, _), (d, _), _ in progress.comparisons()} == {
        "support": "base", "legal": "base", "support-legal-a": "base",
        "chat-support": "chat-base", "chat-legal": "chat-base", "chat-support-legal": "chat-base",
    }  # fmt: skip
    # the report's findings (enabling LoRA, one adapter) take conditions of the fixed-prompt workload only
    assert role_conditions(cfg) == {"base": "base", "one-adapter": "legal"}
