"""Typed analysis records (lorabench/records.py): one serializer each, the field names summary.json has always had."""

from __future__ import annotations

import math

from lorabench.io import read_json
from lorabench.records import BurstScaling, Comparison, EngineComparison, RatioSpan

from .conftest import STUDIES


def test_records_read_and_write_a_committed_summary_unchanged():
    summary = read_json(STUDIES / "h200-8b/summary/summary.json")  # kept as summary.json.gz
    for key, cls in (("comparisons", Comparison), ("engine_comparison", EngineComparison),
                     ("burst_scaling", BurstScaling)):  # fmt: skip
        assert summary[key], key
        for d in summary[key]:
            assert cls.from_json(d).to_json() == d  # type: ignore[attr-defined]


def test_a_comparison_is_within_its_target_by_its_wider_side():
    c = Comparison("s", "vllm", 48, "a", "base", None, RatioSpan(-20.0, -22.5, -19.0), 9, "cycle", 2.0, "")
    assert c.ratio.halfwidth_points == 2.5 and c.within_target is False
    assert Comparison.from_json({**c.to_json(), "target_points": 3.0}).within_target is True
    assert Comparison.from_json({**c.to_json(), "target_points": None}).within_target is None
    assert RatioSpan(1.0, -0.5, 2.0).spans_zero() and not RatioSpan(-5.0, -6.0, -4.0).spans_zero()


def test_an_open_interval_has_no_halfwidth_and_no_verdict_on_its_target():
    c = Comparison("s", None, 3, "a", "base", None, RatioSpan(-5.0, math.nan, math.nan), 2, "unpaired", 1.5, "")
    assert math.isnan(c.ratio.halfwidth_points) and c.within_target is None
    assert c.to_json()["ratio_lo_pct"] is None and c.to_json()["halfwidth_points"] is None
