"""The fidelity benchmark's summary on recorded runs (benchmarks/results): pooling, pairing and missing variants."""

from __future__ import annotations

import statistics
from pathlib import Path

from .support.scripts import benchmark

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _fidelity():
    return benchmark("fidelity")


def test_compare_pairs_rounds_and_reports_ratio_of_medians():
    fid = _fidelity()
    rows = [{"round": i, "client": "a", "ttft": 100.0 + i} for i in range(5)]
    rows += [{"round": i, "client": "b", "ttft": 200.0 + 2 * i} for i in range(4)]  # round 4 missing for b
    c = fid.compare(rows, "a", "b")
    assert c["rounds"] == 4
    f = c["figures"]["ttft"]
    assert f["a_median"] == statistics.median([100, 101, 102, 103])
    assert f["ratio"] == f["a_median"] / f["b_median"] == 0.5
    lo, hi = f["ratio_ci95"]
    assert lo <= 0.5 <= hi
    assert f["within"] is False and f["target_pct"] == 5.0


def test_compare_without_common_rounds_is_empty_not_an_error(capsys):
    fid = _fidelity()
    c = fid.compare([{"round": 0, "client": "a", "ttft": 1.0}], "a", "b")
    assert c["rounds"] == 0 and c["figures"] == {}
    fid.print_comparison("x", c)
    assert "no rounds with both a and b" in capsys.readouterr().out


def test_pool_keys_rounds_by_run_and_finds_the_variants(capsys):
    fid = _fidelity()
    runs = sorted(RESULTS.glob("h200-fidelity-run[456]-*-trust-env.json"))
    assert len(runs) == 3
    assert fid.pool(runs) == 0
    out = capsys.readouterr().out
    assert "(145 rounds)" in out  # 40 + 48 + 57: round numbers repeat across runs and are not merged
    assert "ours vs vLLM's client with trust_env off (145 rounds)" in out
    assert "TTFT against send spread" in out
    assert "our client vs vLLM's client as shipped:" in out


def test_pool_of_an_old_run_without_shared_bursts(capsys):
    fid = _fidelity()
    assert fid.pool([RESULTS / "h200-fidelity-run1-30rounds.json"]) == 0
    out = capsys.readouterr().out
    assert "(30 rounds)" in out and "no rounds with both shared:ours and shared:vllm" in out
    assert "trust_env off" not in out
