"""A co-resident group of two real vLLM (CPU build) servers, LoRA off and LoRA on with 2 slots, measured by one job
(lorabench.group, rule group_loadtest): both servers start and stop (no process left), every cycle holds one burst
of every cell of both servers, in an order of its own, and the summary pairs the LoRA server's base cell with the
LoRA-off server's per cycle. The mechanics only: the precision is the GPU studies' to show."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from lorabench.io import read_json, read_jsonl

from .conftest import EAGER, seed_inputs
from .test_pipeline_e2e import copy_repo, server_processes, snakemake, wait_gone
from .test_server_lifecycle import DEFAULT

pytestmark = [pytest.mark.slow, pytest.mark.full]  # a study of its own: `make test-all` (tests/README.md)
CYCLES = 6  # the fewest that pair (stats.MIN_PAIRED)


@pytest.fixture(scope="module")
def group_study(tmp_path_factory: pytest.TempPathFactory, built_inputs: Path) -> Path:
    work = copy_repo(tmp_path_factory.mktemp("group"))
    seed_inputs(work, built_inputs)
    cfg = copy.deepcopy(DEFAULT)
    for sid in ("lora-4", "sglang-lora-2"):
        del cfg["servers"][sid]
    del cfg["engines"]["sglang-gpu"]
    cfg.pop("runtime_load")
    for srv in cfg["servers"].values():
        srv["args"] = {**srv.get("args", {}), **EAGER}
    cfg["servers"]["lora-2"]["conditions"] = ["base", "ab"]
    cfg["groups"] = {"pair": {"servers": ["lora-off", "lora-2"]}}
    cfg.update(bursts=[4], repetitions=CYCLES, max_repetitions=CYCLES, server_starts=1, max_measuring_s=120)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    snakemake(work, "results/summary/summary.json")
    return work


def test_one_job_starts_both_servers_and_stops_them(group_study: Path):
    assert wait_gone(str(group_study)) == []
    assert server_processes(str(group_study)) == []
    log = (group_study / "logs/group_loadtest/pair.log").read_text()
    assert "group pair: lora-off ready" in log and "group pair: lora-2 ready" in log
    assert not (group_study / "logs/server_loadtest").exists()  # grouped servers get no job of their own
    ports = set()
    for sid in ("lora-off", "lora-2"):
        facts = read_json(group_study / f"results/servers/{sid}/facts.json")
        assert facts["status"] == "ok" and facts["readiness_s"] > 0
        assert facts["config"]["group"] == "pair" and facts["config"]["group_servers"] == ["lora-off", "lora-2"]
        ports.add(facts["argv"][facts["argv"].index("--port") + 1])
        assert (group_study / f"results/servers/{sid}/server.log").read_text()
        assert (group_study / f"results/groups/pair/servers/{sid}/facts.json").exists()
    assert len(ports) == 2


def test_every_cycle_holds_every_cell_of_both_servers_once_in_an_order_of_its_own(group_study: Path):
    group = read_json(group_study / "results/groups/pair/group.json")
    assert group["status"] == "ok" and group["cycles"] == CYCLES
    cells = {f"lora-off:base/4/{s}" for s in "ns"} | {f"lora-2:{c}/4/{s}" for c in ("base", "ab") for s in "ns"}
    assert len(group["orders"]) == CYCLES
    for order in group["orders"]:
        assert sorted(order) == sorted(cells)
    assert len({tuple(o) for o in group["orders"]}) == CYCLES
    files = [group_study / f"results/servers/{sid}/measurements.jsonl" for sid in ("lora-off", "lora-2")]
    rows = [r for f in files for r in read_jsonl(f) if not r["warmup"]]
    assert len(rows) == CYCLES * len(cells)
    for c in range(CYCLES):
        these = sorted((r["group_position"], r["server"], r["condition"], r["stream"]) for r in rows if r["cycle"] == c)
        assert [p for p, *_ in these] == list(range(len(cells)))  # one burst at a time, each place once
        assert [f"{s}:{cond}/4/{'s' if st else 'n'}" for _, s, cond, st in these] == group["orders"][c]
        assert {r["group"] for r in rows} == {"pair"}


def test_the_summary_pairs_the_two_servers_per_cycle(group_study: Path):
    summary = read_json(group_study / "results/summary/summary.json")
    rows = [c for c in summary["server_comparisons"] if c["condition"] == "base"]
    assert len(rows) == 1
    (row,) = rows
    assert (row["server"], row["reference_server"], row["group"], row["burst"]) == ("lora-2", "lora-off", "pair", 4)
    assert row["paired_by"] == "cycle (group)" and row["pairs"] == CYCLES
    assert row["ratio_lo_pct"] <= row["ratio_pct"] <= row["ratio_hi_pct"]
    # within the LoRA server, its own comparison is paired per cycle as before
    (own,) = [c for c in summary["comparisons"] if c["server"] == "lora-2" and c["condition"] == "ab"]
    assert own["paired_by"] == "cycle" and own["pairs"] == CYCLES


def test_a_member_that_fails_to_start_stops_the_members_already_up(tmp_path: Path, built_inputs: Path):
    """The second member's engine refuses its flags: the first, already ready, is stopped with it, the job fails and
    keeps no member's files."""
    work = copy_repo(tmp_path)
    seed_inputs(work, built_inputs)
    cfg = copy.deepcopy(DEFAULT)
    for sid in ("lora-4", "sglang-lora-2"):
        del cfg["servers"][sid]
    del cfg["engines"]["sglang-gpu"]
    cfg.pop("runtime_load")
    cfg["servers"]["lora-off"]["args"] = {"max_model_len": 256, **EAGER}
    cfg["servers"]["lora-2"]["args"] = {"max_model_len": 256, "no_such_flag": 1, **EAGER}
    cfg["groups"] = {"pair": {"servers": ["lora-off", "lora-2"]}}
    cfg.update(bursts=[4], repetitions=3, max_repetitions=3, server_starts=1)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = snakemake(work, "results/groups/pair/group.json", check=False)
    assert proc.returncode != 0
    log = (work / "logs/group_loadtest/pair.log").read_text()
    assert "group pair: lora-off ready" in log and "group pair: lora-2 ready" not in log
    assert "stopping server group" in log
    assert wait_gone(str(work)) == []
    assert not (work / "results/groups/pair").exists() or not any((work / "results/groups/pair").rglob("facts.json"))
