"""The study configs under config/studies/: each loads (schema, references, families), names its GPU time in
its header when it needs a GPU, and marks its GPU engines so a machine without one reports "not run"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lorabench.config import load_file

from .conftest import ROOT

STUDIES = sorted((ROOT / "config" / "studies").glob("*.yaml"))


def test_every_item_has_a_study():
    names = {p.stem for p in STUDIES}
    for study in ("slot-queues", "many-adapters", "rank-sweep"):
        assert {study, f"{study}-cpu"} <= names
    assert {"llama2-7b-rank16", "qwen3-8b-rank16"} <= names


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_study_loads_and_says_what_it_costs(path: Path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = load_file(path)
    header = path.read_text().split("\nstudy:")[0]
    if path.stem.endswith("-cpu"):
        assert all(not e.get("requires_gpu") for e in cfg["engines"].values())
        assert re.search(r"About \d+ minutes on a 2-core machine", header)
    else:
        assert re.search(r"Estimated GPU time: \d+ minutes", header)
        assert all(e.get("requires_gpu") for e in cfg["engines"].values())
    assert cfg["study"].startswith(path.stem)


def test_slot_queues_samples_while_in_flight():
    cfg = load_file(ROOT / "config" / "studies" / "slot-queues-cpu.yaml")
    assert cfg["harness"]["metrics"] == "during"
    assert {s["max_loras"] for s in cfg["servers"].values()} == {2, 4}
