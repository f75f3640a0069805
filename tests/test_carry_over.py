"""A cell's figures split by the slot state its bursts started from (carry_over), on burst rows as the server job
writes them and as the summary flattens them."""

from __future__ import annotations

import pytest

from lorabench.carry_over import by_predecessor, start_state, warm_cold
from lorabench.summary import _flatten


def _row(cond: str, cycle: int, tp: float, resident: list[str] | None, own: list[str], pred: str | None = "x/4/n",
         **kw) -> dict:  # fmt: skip
    row = {"server": "s", "condition": cond, "burst": 4, "stream": False, "warmup": False, "n_errors": 0,
           "cycle": cycle, "server_start": 0, "throughput_tok_s": tp, **kw}  # fmt: skip
    if resident is not None:
        row |= {"predecessor": pred, "predecessor_id": None, "resident_inferred": resident, "burst_adapters": own}
    return row


def _rows() -> list[dict]:
    """Twelve cycles of base and pq: pq from a warm start (p, q resident) in the even cycles at 80 % of base, from a
    cold one (only p) in the odd cycles at 75 %; base drifts from cycle to cycle."""
    rows = []
    for c in range(12):
        base = 1000.0 * (1 + 0.02 * (c % 3))
        warm = c % 2 == 0
        rows.append(_row("base", c, base, ["q", "p"] if warm else ["p"], [], pred="pq/4/n" if warm else "p/4/n"))
        rows.append(_row("pq", c, base * (0.80 if warm else 0.75), ["q", "p"] if warm else ["p"], ["p", "q"],
                         pred="base/4/n"))  # fmt: skip
    return rows


def test_a_burst_starts_warm_when_every_adapter_of_it_was_resident():
    assert start_state(_row("pq", 0, 1.0, ["q", "p"], ["p", "q"])) == "warm"
    assert start_state(_row("pq", 0, 1.0, ["p"], ["p", "q"])) == "cold"
    assert start_state(_row("pq", 0, 1.0, [], ["p", "q"])) == "cold"
    assert start_state(_row("base", 0, 1.0, ["p"], [])) is None  # no adapter: neither
    assert start_state(_row("pq", 0, 1.0, None, [])) is None  # an older row: not recorded
    flat = _flatten(_row("pq", 0, 1.0, ["q", "p"], ["p", "q"]))  # the summary's measurements table
    assert (flat["resident_inferred"], flat["burst_adapters"]) == ("q|p", "p|q") and start_state(flat) == "warm"
    assert start_state(_flatten(_row("pq", 0, 1.0, [], ["p"]))) == "cold"


def test_warm_and_cold_bursts_give_a_figure_each_with_counts():
    rows = _rows() + [
        _row("pq", 12, 1.0, ["p"], ["p", "q"], warmup=True),  # warm-up: left out
        _row("pq", 13, 1.0, ["p"], ["p", "q"], n_errors=1),  # errors: left out
        _row("pq", 14, 1.0, None, []),  # written before the state was recorded: left out
    ]
    (tp,) = [w.to_json() for w in warm_cold(rows)]
    assert (tp["server"], tp["condition"], tp["burst"], tp["stream"], tp["figure"]) == ("s", "pq", 4, False,
                                                                                        "throughput_tok_s")  # fmt: skip
    assert (tp["n_warm"], tp["n_cold"]) == (6, 6)
    assert tp["warm_median"] == pytest.approx(816.0) and tp["cold_median"] == pytest.approx(765.0)
    # the cost against base, paired per cycle: the drift of base cancels, the two starts lie apart
    (cost,) = warm_cold(rows, reference="base")
    assert cost.figure == "vs_base_pct" and (cost.warm.n, cost.cold.n) == (6, 6)
    assert (cost.warm.median, cost.warm.lo, cost.warm.hi) == pytest.approx((-20.0, -20.0, -20.0))
    assert (cost.cold.median, cost.cold.lo, cost.cold.hi) == pytest.approx((-25.0, -25.0, -25.0))
    assert cost.apart and cost.to_json()["apart"] is True
    # fewer than six bursts a side: no 95 % interval, never called apart
    (few,) = warm_cold(rows[:8], reference="base")
    assert (few.warm.n, few.cold.n) == (2, 2) and not few.apart


def test_a_cells_throughput_by_its_predecessor():
    rows = _rows()
    rows.append(_row("pq", 12, 500.0, [], ["p", "q"], pred=None))  # the first burst after a server start
    split = by_predecessor(rows)
    assert set(split) == {("s", "base", 4, False), ("s", "pq", 4, False)}
    assert {p: iv.n for p, iv in split[("s", "base", 4, False)].items()} == {"p/4/n": 6, "pq/4/n": 6}
    assert {p: iv.n for p, iv in split[("s", "pq", 4, False)].items()} == {"base/4/n": 12, "-": 1}
    assert by_predecessor([_row("pq", 0, 1.0, None, [])]) == {}  # older rows: nothing to split


def test_the_summary_keeps_each_mixs_cost_from_both_starts_and_the_report_shows_it():
    from lorabench.summary import warm_cold_rows

    flat = [_flatten(r) for r in _rows()]  # as summary.json's measurements hold them
    (w,) = warm_cold_rows(flat, {"server": "s", "condition": "base"})
    assert (w["condition"], w["figure"], w["apart"]) == ("pq", "vs_base_pct", True)
    assert (w["warm_median"], w["cold_median"]) == pytest.approx((-20.0, -25.0))
    older = [{k: v for k, v in r.items() if k != "resident_inferred"} for r in flat]
    assert warm_cold_rows(older, {"condition": "base"}) == []  # studies from before the start state was recorded
    assert warm_cold_rows(flat, None) == []
