from __future__ import annotations

import math

from lorabench.stats import Summary, first_stands_out, fmt_num


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
