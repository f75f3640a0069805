"""Co-resident server groups with real vLLM (CPU build) servers. The session's study (conftest.study) measures its
LoRA-off and 2-slot servers as one group (lorabench.group, rule group_loadtest): both servers start and stop (no
process left), every cycle holds one burst of every cell of both servers, in an order of its own, and the summary
pairs the 2-slot server's base cell with the LoRA-off server's per cycle. The mechanics only: on this 2-core host
co-resident servers share one CPU (benchmarks/results/coresident-cpu.txt), so the precision is the GPU studies' to
show. A member that fails to start stops the others (a group of its own, `make test-all`)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from lorabench.io import read_json, read_jsonl

from .conftest import EAGER, LIGHTER, STUDY_GROUP, STUDY_GROUP_SERVERS, STUDY_MIXES, seed_inputs
from .test_pipeline_e2e import copy_repo, server_processes, snakemake, wait_gone
from .test_server_lifecycle import DEFAULT

pytestmark = pytest.mark.slow
CYCLES = int(LIGHTER["repetitions"])  # the session study's cycles: at least stats.MIN_PAIRED, so they pair
MIXES = STUDY_MIXES.strip("[]").split(", ")
G = STUDY_GROUP


def test_one_job_starts_both_servers_and_stops_them(study: Path):
    assert wait_gone(str(study)) == []
    assert server_processes(str(study)) == []
    log = (study / f"logs/group_loadtest/{G}.log").read_text()
    assert all(f"group {G}: {sid} ready" in log for sid in STUDY_GROUP_SERVERS)
    # grouped servers get no job of their own (the study's SGLang server, not run here, has one)
    assert not [sid for sid in STUDY_GROUP_SERVERS if (study / f"logs/server_loadtest/{sid}.log").exists()]
    ports = set()
    for sid in STUDY_GROUP_SERVERS:
        facts = read_json(study / f"results/servers/{sid}/facts.json")
        assert facts["status"] == "ok" and facts["readiness_s"] > 0
        assert facts["config"]["group"] == G and facts["config"]["group_servers"] == list(STUDY_GROUP_SERVERS)
        ports.add(facts["argv"][facts["argv"].index("--port") + 1])
        assert (study / f"results/servers/{sid}/server.log").read_text()
        assert (study / f"results/groups/{G}/servers/{sid}/facts.json").exists()
    assert len(ports) == 2


def test_every_cycle_holds_every_cell_of_both_servers_once_in_an_order_of_its_own(study: Path):
    group = read_json(study / f"results/groups/{G}/group.json")
    assert group["status"] == "ok" and group["cycles"] == CYCLES
    cells = {f"lora-off:base/4/{s}" for s in "ns"} | {f"lora-2:{c}/4/{s}" for c in MIXES for s in "ns"}
    assert len(group["orders"]) == CYCLES
    for order in group["orders"]:
        assert sorted(order) == sorted(cells)
    assert len({tuple(o) for o in group["orders"]}) == CYCLES
    files = [study / f"results/servers/{sid}/measurements.jsonl" for sid in STUDY_GROUP_SERVERS]
    rows = [r for f in files for r in read_jsonl(f) if not r["warmup"]]
    assert len(rows) == CYCLES * len(cells)
    for c in range(CYCLES):
        these = sorted((r["group_position"], r["server"], r["condition"], r["stream"]) for r in rows if r["cycle"] == c)
        assert [p for p, *_ in these] == list(range(len(cells)))  # one burst at a time, each place once
        assert [f"{s}:{cond}/4/{'s' if st else 'n'}" for _, s, cond, st in these] == group["orders"][c]
    assert {r["group"] for r in rows} == {G}


def test_the_summary_pairs_the_two_servers_per_cycle(study: Path):
    summary = read_json(study / "results/summary/summary.json")
    rows = [c for c in summary["server_comparisons"] if c["condition"] == "base"]
    assert len(rows) == 1
    (row,) = rows
    assert (row["server"], row["reference_server"], row["group"], row["burst"]) == ("lora-2", "lora-off", G, 4)
    assert row["paired_by"] == "cycle (group)" and row["pairs"] == CYCLES
    assert row["ratio_lo_pct"] <= row["ratio_pct"] <= row["ratio_hi_pct"]
    # within the LoRA server, its own comparisons are paired per cycle as before
    (own,) = [c for c in summary["comparisons"] if c["server"] == "lora-2" and c["condition"] == "abc"]
    assert own["paired_by"] == "cycle" and own["pairs"] == CYCLES
    # the report lists the pair and says, of LoRA's cost, that its two servers were paired
    html = (study / "results/report/index.html").read_text()
    assert 'id="paired-servers"' in html and "how do co-resident servers compare, paired in time?" in html
    assert f"paired per cycle: the two servers were co-resident, in group {G}" in html


@pytest.mark.full  # a group of its own: `make test-all` (tests/README.md)
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
