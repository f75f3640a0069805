"""Method v2's loop without a server: the random order per cycle, per-cycle pairing, and the stop rule's three exits."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from lorabench.measure.cycles import Cell, Progress, Targets, cycle_cells, cycle_order, cycles_per_start, run_cycles
from lorabench.measure.paired import PairedRatio
from lorabench.stats import MedianInterval, by_time, paired_ratios, ratio_span


def test_cells_of_a_server_in_their_listed_order():
    cells = cycle_cells(["base", "a"], [8, 4], "both")
    assert cells[:2] == [Cell("base", 4, False), Cell("base", 4, True)] and len(cells) == 8
    assert [c.stream for c in cycle_cells(["a"], [4], "off")] == [False]
    with pytest.raises(ValueError, match="stream"):
        cycle_cells(["a"], [4], "sometimes")


def test_each_cycle_runs_every_cell_once_in_an_order_drawn_from_the_seed_and_cycle():
    cells = cycle_cells(["base", "a"], [8, 4], "both")
    orders = [cycle_order(cells, cycle, seed=7) for cycle in range(40)]
    assert all(sorted(o) == sorted(cells) for o in orders)  # every cell once per cycle
    assert orders == [cycle_order(cells, cycle, seed=7) for cycle in range(40)]  # same seed, same orders
    assert orders != [cycle_order(cells, cycle, seed=8) for cycle in range(40)]  # another seed, others
    assert len({tuple(o) for o in orders}) > 30  # a fresh order per cycle, not a rotation (8 of them)
    positions = {c: {o.index(c) for o in orders} for c in cells}
    assert all(len(p) >= 6 for p in positions.values())  # each cell takes (nearly) every place
    # every cell follows every other cell within a cycle in some cycle: no fixed predecessor
    follows = {(o[i - 1], o[i]) for o in orders for i in range(1, len(o))}
    assert all((x, y) in follows for x in cells for y in cells if x != y)
    # of two cells, both orders occur over a few cycles
    two = cycle_cells(["base", "a"], [4], "off")
    assert {tuple(cycle_order(two, c, seed=0)) for c in range(8)} == {tuple(two), tuple(reversed(two))}
    assert cycle_order([], 3, seed=0) == []


def test_run_cycles_sends_each_cycle_in_the_order_of_its_seed():
    seen: list = []
    t = Targets(min_cycles=6, max_cycles=6, target_points=1.0, target_ci_pct=1.0, max_measuring_s=1e9)
    _run(lambda cell, c: 100.0, t, bursts=(4, 8), seen=seen, seed=5)
    cells = cycle_cells(["base", "a"], [4, 8], "both")
    for cycle in range(6):
        sent = [(cell, pos, length) for cell, cyc, pos, length in seen if cyc == cycle]
        assert [c for c, _, _ in sent] == cycle_order(cells, cycle, seed=5)
        assert [pos for _, pos, _ in sent] == list(range(8)) and {n for _, _, n in sent} == {8}


def test_pairing_per_cycle_cancels_drift_that_widens_each_cell():
    rng = random.Random(1)
    drift = {(0, c): 0.5 + rng.random() for c in range(12)}  # the host's speed, moving by 3x between cycles
    den = dict(drift)
    num = {k: 0.8 * v for k, v in drift.items()}
    p = PairedRatio.of_pairs(num, den)
    assert p.n == 12 and p.pct == pytest.approx(-20.0) and p.halfwidth_points == pytest.approx(0.0, abs=1e-9)
    assert p.within(0.5)
    assert MedianInterval.of(list(den.values())).halfwidth_pct > 30  # unpaired, the cell alone is wide
    assert not PairedRatio.of_pairs(dict(list(num.items())[:5]), den).within(100.0)  # five pairs: no true 95 % interval


def test_summary_rows_pair_bursts_of_one_cycle_exactly():
    num = {"server": "s", "throughput_by_cycle": by_time([(0, c, 80.0 + c) for c in range(8)])}
    den = {"server": "s", "throughput_by_cycle": by_time([(0, c, 100.0 + 1.25 * c) for c in range(8)])}
    assert paired_ratios(num, den) == pytest.approx([0.8] * 8)
    pct, lo, hi = ratio_span(num, den)
    assert (pct, lo, hi) == pytest.approx((-20.0, -20.0, -20.0))
    other = {**den, "server": "t", "throughput_median": 100.0, "throughput_ci_lo": 90.0, "throughput_ci_hi": 110.0}
    assert paired_ratios({**num, "throughput_median": 80.0}, other) == []  # two servers are never paired


def _run(values, targets: Targets, conditions=("base", "a"), bursts=(4,), seen=None, seed=0) -> Progress:
    """run_cycles with a burst function that returns ``values(cell, cycle)`` and lasts 0.5 s each."""
    cells = cycle_cells(list(conditions), list(bursts), "both")
    progress = Progress("base", list(conditions), list(bursts))
    seen = [] if seen is None else seen

    async def burst(cell: Cell, cycle: int, pos: int, length: int) -> tuple[float, float]:
        seen.append((cell, cycle, pos, length))
        return values(cell, cycle), 0.5

    asyncio.run(run_cycles(burst, cells, progress, targets, 0, None, "both", seed=seed))
    if not targets.focus:
        assert len(seen) == progress.cycles * len(cells)
    return progress


def test_after_the_minimum_a_focused_cycle_measures_only_the_cells_still_needed():
    # a vs base is steady at burst 4 and noisy at 16: once the minimum is done, the cycles go to burst 16's
    # non-streamed cells (both sides of its comparison), at seconds a cycle
    rng = random.Random(3)

    def value(cell: Cell, c: int) -> float:
        noise = 0.2 * rng.random() if cell.burst == 16 else 0.0
        return (80.0 if cell.condition == "a" else 100.0) * (1 + noise)

    seen: list = []
    t = Targets(min_cycles=6, max_cycles=30, target_points=1.0, target_ci_pct=1.0, max_measuring_s=1e9, focus=True)
    p = _run(value, t, bursts=(4, 16), seen=seen)
    assert p.cycles == 30 and p.focused_from == 6
    later = [(cell, length) for cell, cycle, _, length in seen if cycle >= 6]
    assert {(c.condition, c.burst, c.stream) for c, _ in later} == {("a", 16, False), ("base", 16, False)}
    assert {length for _, length in later} == {2} and len(seen) == 6 * 8 + 24 * 2
    assert len(p.values[("a", 4)]) == 6 and len(p.values[("a", 16)]) == 30  # paired in every cycle they share
    unfocused = _run(value, Targets(6, 30, 1.0, 1.0, 1e9), bursts=(4, 16))
    assert unfocused.cycles == 30 and unfocused.focused_from == 0


def test_cycles_stop_once_every_comparison_is_within_target():
    drift = lambda c: 1.0 + 0.3 * math.sin(c)  # noqa: E731
    value = lambda cell, c: (80.0 if cell.condition == "a" else 100.0) * drift(c)  # noqa: E731
    p = _run(value, Targets(min_cycles=6, max_cycles=40, target_points=1.0, target_ci_pct=1.0, max_measuring_s=1e9))
    assert p.cycles == 6 and p.stop_reason.startswith("every target met")
    ((num, den, ratio),) = p.comparisons()
    assert num == ("a", 4) and den == ("base", 4) and ratio.pct == pytest.approx(-20.0)


def test_cycles_stop_at_their_maximum_count_or_time():
    rng = random.Random(2)
    noisy = lambda cell, c: 100.0 * (1 + 0.2 * rng.random())  # noqa: E731
    p = _run(noisy, Targets(min_cycles=6, max_cycles=9, target_points=0.1, target_ci_pct=0.1, max_measuring_s=1e9))
    assert p.cycles == 9 and p.stop_reason.startswith("max_cycles")
    p = _run(noisy, Targets(min_cycles=6, max_cycles=99, target_points=0.1, target_ci_pct=0.1, max_measuring_s=14.0))
    assert p.cycles == 7 and p.stop_reason.startswith("max_measuring_s")  # 4 bursts of 0.5 s a cycle


def test_a_server_without_comparisons_stops_on_its_cells_own_interval():
    flat = lambda cell, c: 100.0  # noqa: E731
    p = _run(
        flat, Targets(min_cycles=3, max_cycles=40, target_points=0.1, target_ci_pct=1.0, max_measuring_s=1e9), ("base",)
    )
    assert p.comparisons() == [] and p.cycles == 6  # six values: the fewest with a true 95 % interval


def test_earlier_server_starts_share_the_minimum_cycles():
    t = Targets(min_cycles=10, max_cycles=40, target_points=1.0, target_ci_pct=1.0, max_measuring_s=60)
    assert cycles_per_start(t, 1) == [None]
    assert cycles_per_start(t, 3) == [4, 8, None]


def test_burst_scaling_pairs_the_largest_burst_with_the_smallest_per_cycle():
    from lorabench.summary import burst_scaling

    drift = [1.0, 1.4, 0.7, 1.1, 0.9, 1.2, 1.0]
    rows = [
        {"server": "s", "condition": "a", "burst": b, "status": "ok",
         "throughput_by_cycle": by_time([(0, c, tok * d) for c, d in enumerate(drift)])}
        for b, tok in ((4, 100.0), (8, 180.0), (16, 300.0))
    ]  # fmt: skip
    (row,) = [b.to_json() for b in burst_scaling(rows)]
    assert (row["burst"], row["reference_burst"], row["pairs"]) == (16, 4, 7)
    assert (row["ratio_pct"], row["ratio_lo_pct"], row["ratio_hi_pct"]) == pytest.approx((200.0, 200.0, 200.0))
