"""``lorabench compare RUN_A RUN_B``: two runs' paired comparisons and cells side by side, marking the figures whose
95 % intervals lie apart (lorabench.compare), as text and as JSON."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from lorabench import cli
from lorabench.compare import CompareError, load_summary, pairs, report
from lorabench.io import read_json

from .conftest import ROOT

RUN = ROOT / "tests" / "fixtures" / "studies" / "h200-8b" / "summary" / "summary.json"  # stored gzipped


def _shifted(points: float) -> dict:
    """The fixture's summary with vllm-lora-2's a-vs-base comparison moved by ``points``, interval and all."""
    s = copy.deepcopy(read_json(RUN))
    for c in s["comparisons"]:
        if (c["server"], c["condition"], c["burst"]) == ("vllm-lora-2", "a", 48):
            for k in ("ratio_pct", "ratio_lo_pct", "ratio_hi_pct"):
                c[k] += points
    return s


def test_a_run_against_itself_agrees_on_every_figure():
    run = read_json(RUN)
    found = pairs(run, run)
    kinds = {p.kind for p in found}
    assert kinds == {"comparison", "cell"} and not any(p.apart for p in found)
    n = sum(1 for c in run["comparisons"] if c["paired_by"] != "unpaired")
    assert sum(p.kind == "comparison" for p in found) == n
    text = report(found, "A", "B")
    assert f"0 of {n} comparisons differ beyond their intervals" in text


def test_a_comparison_moved_beyond_its_interval_is_marked_apart():
    found = pairs(read_json(RUN), _shifted(-6.0))
    (moved,) = [p for p in found if p.apart]
    assert moved.key == "vllm-lora-2 a vs base, burst 48" and moved.to_json()["difference"] == pytest.approx(-6.0)
    line = next(x for x in report(found, "A", "B").splitlines() if x.startswith("vllm-lora-2 a vs base, burst 48"))
    assert line.endswith("-6.0 points  APART")
    # within its interval: no mark
    assert not any(p.apart for p in pairs(read_json(RUN), _shifted(-0.5)))


def test_the_command_reads_results_folders_summaries_and_says_what_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    (tmp_path / "b" / "summary").mkdir(parents=True)
    (tmp_path / "b" / "summary" / "summary.json").write_text(json.dumps(_shifted(-6.0)))
    code = cli.main(["compare", str(RUN.with_suffix(".json.gz")), str(tmp_path / "b"), "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["key"] for r in rows if r["apart"]] == ["vllm-lora-2 a vs base, burst 48"]
    assert cli.main(["compare", str(tmp_path / "b"), str(tmp_path / "nothing")]) == cli.EXIT_CONFIG
    assert f"{tmp_path / 'nothing'}: no summary.json, results folder or study archive here" in capsys.readouterr().err
    with pytest.raises(CompareError):
        load_summary(tmp_path, ROOT)
