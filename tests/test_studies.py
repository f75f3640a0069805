"""The study configs under config/studies/: each loads (schema, references, families), names its GPU time in
its header when it needs a GPU, and marks its GPU engines so a machine without one reports "not run"."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from lorabench.config import load_file

from .conftest import ROOT

STUDIES = sorted((ROOT / "config" / "studies").glob("*.yaml"))


def test_every_item_has_a_study():
    names = {p.stem for p in STUDIES}
    for study in ("slot-queues", "many-adapters", "rank-sweep"):
        assert {study, f"{study}-cpu"} <= names
    assert {"llama2-7b-rank16", "punica-cpu", "qwen3-8b-rank16"} <= names


def _estimated_minutes(path: Path) -> tuple[float, float]:
    out = subprocess.run(
        [
            sys.executable,
            "tools/estimate_study.py",
            str(path),
            "--from",
            *(f"tests/fixtures/estimate/{s}" for s in ("h200-8b", "prefix-cache-h200", "prefill-decode-h200")),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    m = re.search(r"^total\s+([\d.]+)-([\d.]+)", out, re.M)
    assert m, out
    return float(m.group(1)), float(m.group(2))


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_study_loads_and_says_what_it_costs(path: Path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_file(path)
    header = path.read_text().split("\nstudy:")[0]
    if path.stem.endswith("-cpu"):
        assert all(not e.get("requires_gpu") for e in cfg["engines"].values())
        assert re.search(r"About \d+ minutes on a 2-core machine", header)
    else:
        m = re.search(r"Estimated GPU time: (\d+)-(\d+) minutes", header)
        assert m, header
        # never more hopeful than the estimate from the committed H200 jobs (tools/estimate_study.py, on what it reads
        # of them: tests/fixtures/estimate/)
        lo, hi = _estimated_minutes(path)
        assert int(m.group(1)) >= round(lo) - 1 and int(m.group(2)) >= round(hi) - 1, (m.group(0), lo, hi)
        assert all(e.get("requires_gpu") for e in cfg["engines"].values())
    assert cfg["study"].startswith(path.stem)


def test_slot_queues_samples_while_in_flight():
    cfg = load_file(ROOT / "config" / "studies" / "slot-queues-cpu.yaml")
    assert cfg["harness"]["metrics"] == "during"
    assert {s["max_loras"] for s in cfg["servers"].values()} == {2, 4}
