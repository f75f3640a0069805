"""benchmarks/aa_check.py: finds the A/A pairs of a study (conditions naming the same adapters on one server) and
says whether each interval holds 0."""

from __future__ import annotations

import json

from lorabench.stats import by_time

from .support.scripts import benchmark


def _module():
    return benchmark("aa_check")


def _row(cond: str, values: list[float]) -> dict:
    cycles = by_time([(0, c, v) for c, v in enumerate(values)])
    return {"server": "s", "condition": cond, "burst": 8, "status": "ok", "throughput_by_cycle": cycles}


def test_aa_pairs_hold_zero_or_say_so(tmp_path):
    drift = [1.0, 1.3, 0.8, 1.1, 0.9, 1.2, 1.0, 0.7, 1.05]
    noise = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99]
    summary = {
        "conditions": {"base": {"adapters": ["base"]}, "base-aa": {"adapters": ["base"]}, "a": {"adapters": ["a"]}},
        "rows": [
            _row("base", [100 * d for d in drift]),
            _row("base-aa", [100 * d * n for d, n in zip(drift, noise, strict=True)]),
            _row("a", [80 * d for d in drift]),
        ],
        "comparisons": [{"server": "s", "condition": "a", "halfwidth_points": 0.0}],
    }
    (tmp_path / "summary").mkdir()
    (tmp_path / "summary" / "summary.json").write_text(json.dumps(summary))
    mod = _module()
    (pair,) = mod.aa_pairs(summary)  # a is no A/A of base: other adapters
    assert (pair["condition"], pair["reference"], pair["pairs"]) == ("base-aa", "base", 9)
    assert pair["ratio_lo_pct"] <= 0 <= pair["ratio_hi_pct"] and pair["halfwidth_points"] < 2.5
    lines, ok = mod.report(tmp_path)
    assert ok and "0 inside" in lines[1]
    summary["rows"][1] = _row("base-aa", [110 * d for d in drift])  # a cell 10 % off: not an A/A that holds
    (tmp_path / "summary" / "summary.json").write_text(json.dumps(summary))
    lines, ok = mod.report(tmp_path)
    assert not ok and "0 OUTSIDE" in lines[1]
