from __future__ import annotations

import math

import pytest

from lorabench.stats import MedianInterval, Summary, by_time, first_stands_out, fmt_num, paired_ratios, ratio_span


def test_summary_matches_source_spread_definition():
    # The source's five no-adapter values and its "±0.4%" spread (half range over median).
    s = Summary.of([2647, 2658, 2669, 2663, 2667])
    assert s.n == 5 and s.median == 2663 and s.min == 2647 and s.max == 2669
    assert round(s.spread_pct, 1) == 0.4


def test_summary_of_nothing_is_nan():
    s = Summary.of([])
    assert s.n == 0 and math.isnan(s.median)
    assert fmt_num(s.median) == "-" and fmt_num(0.1234) == "0.123" and fmt_num(1234.56) == "1,234.6"


def test_first_repetition_flagged_like_the_source_warmup():
    # Adapter a in the source: first value 2,183 then 2,390-2,398.
    flag, dev = first_stands_out([2183, 2398, 2390, 2391, 2390])
    assert flag and round(dev, 1) == -8.7
    flag, _ = first_stands_out([2647, 2658, 2669, 2663, 2667])
    assert not flag


def _cell(server: str, points: list[tuple[int, int, float]]) -> dict:
    vals = [v for *_, v in points]
    iv = MedianInterval.of(vals)
    return {"server": server, "throughput_median": iv.median, "throughput_ci_lo": iv.lo, "throughput_ci_hi": iv.hi,
            "throughput_by_time": by_time(points)}  # fmt: skip


def test_cells_of_one_job_compare_measurement_by_measurement():
    # a slow spell shared by measurements taken one after the other (orders 2k and 2k+1)
    drift = [1.0, 1.0, 0.8, 0.8, 1.2, 1.2, 1.0, 0.9, 1.1, 1.0]
    base = [(0, 2 * k, 1000.0 * d) for k, d in enumerate(drift)]
    a = [(0, 2 * k + 1, 700.0 * d) for k, d in enumerate(drift)]
    assert paired_ratios(_cell("s", a), _cell("s", base)) == pytest.approx([0.7] * 10)
    med, lo, hi = ratio_span(_cell("s", a), _cell("s", base))
    assert (med, lo, hi) == pytest.approx((-30.0, -30.0, -30.0))
    # the same figures on two servers: nothing pairs them, the span is what the two intervals allow
    med, lo, hi = ratio_span(_cell("s1", a), _cell("s2", base))
    assert med == pytest.approx(-30.0) and lo < -40 and hi > -15


def test_pairs_stay_on_one_server_start_and_need_six():
    base = [(s, 10 * s + k, 1000.0) for s in (0, 1) for k in range(4)]
    a = [(s, 10 * s + k + 5, 500.0) for s in (0, 1) for k in range(4)]
    assert len(paired_ratios(_cell("s", a), _cell("s", base))) == 8
    # the mix measured only on start 1, the base only on start 0: no pair
    assert (
        paired_ratios(_cell("s", [(1, 20 + k, 500.0) for k in range(8)]), _cell("s", [(0, k, 1e3) for k in range(8)]))
        == []
    )
    # five pairs are too few for a 95 % interval
    assert paired_ratios(_cell("s", a[:5]), _cell("s", base[:5])) == []
    assert ratio_span(_cell("s", a[:5]), _cell("s", base[:5]))[0] == pytest.approx(-50.0)
