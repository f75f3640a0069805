"""Rate sweeps: the rate grid, over-saturation, capacity at the SLO on synthetic points, the records' JSON (unit),
and a short sweep against the fake server with slots (integration)."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from lorabench.loadgen.arrivals import OpenLoopRun, Phases, Sent
from lorabench.loadgen.client import RequestRecord
from lorabench.measure.rate_points import later_larger_p
from lorabench.measure.sweep import (
    Capacity,
    MixRequests,
    OverSaturation,
    RatePoint,
    Slo,
    SweepError,
    SweepOutcome,
    SweepResult,
    SweepSettings,
    cycle_capacity,
    probes_agree,
    search_range,
    sweep_server,
)

from ..support.fake_server import start_in_process

NAN = float("nan")
OVER = OverSaturation(min_achieved_fraction=0.9, ttft_growth_factor=2.0, ttft_growth_min_ms=50.0)
OVER_TESTED = OverSaturation(0.9, 2.0, 50.0, ttft_growth_alpha=0.001)  # the TTFT rule with the schema's default level
SLO = Slo(ttft_p99_ms=100.0, itl_p99_ms=20.0)


def settings(**kw: object) -> SweepSettings:
    base: dict[str, object] = {
        "points": 10,
        "max_rate_factor": 2.0,
        "warmup_s": 1.0,
        "duration_s": 5.0,
        "drain_s": 1.0,
        "repeats": 3,
        "probe_concurrency": 8,
        "settle_s": 0.0,
        "max_send_lag_ms": 10.0,
        "max_in_flight": 512,
        "over_saturation": OVER,
        "slo": SLO,
        "seed": 0,
        "request_timeout_s": 30.0,
    }
    return SweepSettings(**{**base, **kw})  # type: ignore[arg-type]


def point(rate: float, ttft99: float, itl99: float = 5.0, over: str = "", cycle: int = 0, n: int = 50) -> RatePoint:
    """A synthetic point: only what the capacity search reads is meaningful."""
    return RatePoint(
        server="s",
        mix="m",
        cycle=cycle,
        position=0,
        shape="poisson",
        fraction=rate / 10,
        rate_per_s=rate,
        concurrency=0,
        duration_s=5.0,
        offered_per_s=rate,
        achieved_per_s=rate,
        output_tok_per_s=rate * 32,
        goodput_per_s=rate,
        n_sent=n,
        n_window=n,
        n_completed=n,
        n_errors=0,
        n_cut=0,
        ttft_ms_p50=ttft99 / 2,
        ttft_ms_p90=ttft99 * 0.8,
        ttft_ms_p99=ttft99,
        itl_ms_p50=itl99 / 2,
        itl_ms_p90=itl99 * 0.8,
        itl_ms_p99=itl99,
        e2e_ms_p50=ttft99,
        e2e_ms_p90=ttft99,
        e2e_ms_p99=ttft99,
        ttft_first_third_ms=ttft99 / 2,
        ttft_last_third_ms=ttft99 / 2,
        send_lag_ms_p50=0.5,
        send_lag_ms_p99=1.0,
        send_lag_ms_max=2.0,
        peak_in_flight=4,
        over_saturated=over,
    )


def test_rates_run_from_ten_percent_to_the_probe_and_beyond_in_the_same_steps():
    assert settings(points=10, max_rate_factor=1.5).fractions() == pytest.approx(
        [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    )
    assert settings(points=4, max_rate_factor=1.0).fractions() == pytest.approx([0.1, 0.4, 0.7, 1.0])
    assert settings(points=2, max_rate_factor=3.0).fractions() == pytest.approx([0.1, 1.0, 1.9, 2.8])


def test_rate_rule_needs_the_fraction_and_a_few_requests_missing():
    assert OVER.judge(100, 95, 10, 12) == ""
    assert "85 requests completed in the window against 100 arrivals" in OVER.judge(100, 85, 10, 12)
    assert OVER.judge(10, 8, 10, 12) == ""  # 80 %, but only 2 requests short: one in flight at the window's end
    # 404 of 450 is 89.8 %: said so, not rounded up to the 90 % it falls short of (an H200 log read "90% < 90%")
    assert "(89.8% < 90%)" in OVER.judge(450, 404, 10, 12)


def test_ttft_rule_needs_the_factor_and_the_floor():
    assert "TTFT p50 grew 3.0x" in OVER.judge(0, 0, 40.0, 120.0)
    assert OVER.judge(0, 0, 2.0, 30.0) == ""  # 15x, but 28 ms: below the 50 ms floor
    assert OVER.judge(0, 0, 100.0, 180.0) == ""  # 80 ms more, but 1.8x
    assert "without bound" in OVER.judge(0, 0, 40.0, math.inf)


def test_later_larger_p_is_the_mann_whitney_test_with_ties():
    first, last = [1.0, 2.0, 2.0, 3.0, 5.0], [2.0, 4.0, 5.0, 6.0, math.inf]
    u = sum((y > x) + 0.5 * (y == x) for x in first for y in last)
    n, ties = 10, (3**3 - 3) + (2**3 - 2)  # 2.0 three times, 5.0 twice
    sd = math.sqrt(25 / 12 * ((n + 1) - ties / (n * (n - 1))))
    assert later_larger_p(first, last) == pytest.approx(0.5 * math.erfc((u - 12.5 - 0.5) / sd / math.sqrt(2)))
    assert later_larger_p(last, first) > 0.9
    assert later_larger_p([3.0] * 4, [3.0] * 4) == 1.0
    assert math.isnan(later_larger_p([], [1.0]))
    with pytest.raises(ValueError, match="NaN"):
        later_larger_p([1.0, NAN], [2.0])
    # three against three can never reach 0.001, thirty against thirty in order can
    assert later_larger_p([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) > 0.01
    assert later_larger_p([float(i) for i in range(30)], [float(i) for i in range(30, 60)]) < 1e-9


def test_ttft_rule_needs_the_growth_beyond_chance_where_a_level_is_set():
    assert "p = 0.0001" in OVER_TESTED.judge(0, 0, 40.0, 120.0, growth_p=1e-4)
    assert OVER_TESTED.judge(0, 0, 40.0, 120.0, growth_p=0.04) == ""
    assert "without bound" not in OVER_TESTED.judge(0, 0, 40.0, math.inf, growth_p=0.04)
    assert "TTFT p50 grew" in OVER.judge(0, 0, 40.0, 120.0, growth_p=0.04)  # no level set: sweeps before the test


def _rec(i: int, start: float, ttft: float, end: float) -> RequestRecord:
    return RequestRecord(
        f"r{i}", "m", "a", start_s=start, end_s=end, latency_s=end - start, ttft_s=ttft, completion_tokens=8
    )


def test_a_run_whose_queue_grows_is_over_saturated():
    """Synthetic records of a run at 20 req/s (window [1, 6] s) where TTFT grows by 100 ms each second and every
    request takes 0.1 s more than its TTFT."""
    t0 = 50.0
    sent = []
    for i in range(140):
        s = i / 20
        ttft = 0.02 + 0.1 * s
        sent.append(Sent(_rec(i, t0 + s, ttft, t0 + s + ttft + 0.1), scheduled_s=s, send_lag_s=0.001))
    run = OpenLoopRun("poisson", Phases(1.0, 5.0, 1.0), t0, sent, rate_per_s=20.0, max_send_lag_s=0.01)
    p = RatePoint.of_run(run, server="s", mix="m", cycle=0, position=0, fraction=0.5, slo=SLO, over=OVER_TESTED)
    assert "TTFT p50 grew" in p.over_saturated and p.ttft_growth_p < 1e-9
    assert p.ttft_ms_p99 > p.ttft_ms_p50 > 100
    assert p.client_bound == ""
    assert p.offered_per_s == pytest.approx(20.0)
    assert "over-saturated" in p.missed(SLO)


def test_a_few_slow_requests_late_in_a_small_window_are_not_a_growing_queue():
    """Ten requests at 1.25 req/s (window [1, 9] s) on a server that swaps adapters into two slots: most get their
    first token in 30 ms, two of the last three wait 220 ms for a slot (the medians of the thirds: 30 -> 220 ms,
    as in a vLLM run on an H200). Without the test the TTFT rule calls it over-saturated."""
    t0 = 50.0
    sent = []
    for i in range(12):
        s = 0.2 + i * 0.8
        ttft = 0.22 if i in (8, 10) else 0.03
        sent.append(Sent(_rec(i, t0 + s, ttft, t0 + s + ttft + 0.5), scheduled_s=s, send_lag_s=0.001))
    run = OpenLoopRun("poisson", Phases(1.0, 8.0, 1.0), t0, sent, rate_per_s=1.25, max_send_lag_s=0.01)
    p = RatePoint.of_run(run, server="s", mix="m", cycle=0, position=0, fraction=0.1, slo=SLO, over=OVER_TESTED)
    assert (p.ttft_first_third_ms, p.ttft_last_third_ms) == pytest.approx((30.0, 220.0))
    assert p.over_saturated == "" and p.ttft_growth_p > 0.01
    old = RatePoint.of_run(run, server="s", mix="m", cycle=0, position=0, fraction=0.1, slo=SLO, over=OVER)
    assert "TTFT p50 grew 7.3x" in old.over_saturated


def test_a_steady_run_is_not_over_saturated_and_counts_goodput():
    t0 = 50.0
    sent = []
    for i in range(140):
        s = i / 20
        ttft = 0.03 if i % 4 else 0.3  # every fourth request misses the 100 ms TTFT bound
        r = _rec(i, t0 + s, ttft, t0 + s + ttft + 0.05)
        r.itl_s = [0.005] * 7
        sent.append(Sent(r, scheduled_s=s, send_lag_s=0.001))
    run = OpenLoopRun("poisson", Phases(1.0, 5.0, 1.0), t0, sent, rate_per_s=20.0, max_send_lag_s=0.01)
    p = RatePoint.of_run(run, server="s", mix="m", cycle=0, position=0, fraction=0.5, slo=SLO, over=OVER)
    assert p.over_saturated == ""
    assert p.achieved_per_s == pytest.approx(20.0, abs=0.4)
    assert p.goodput_per_s == pytest.approx(0.75 * p.achieved_per_s, abs=0.4)
    assert p.itl_ms_p99 == pytest.approx(5.0) and p.tpot_ms_p99 == pytest.approx(5.0)


def test_tpot_is_each_requests_mean_gap_and_its_own_slo_term():
    """Every tenth request has one 200 ms stall among 9 gaps of 5 ms: p99 ITL (over gaps) is the stall's order,
    p99 TPOT (over requests) about (200 + 8 x 5) / 9 = 26.7 ms. An SLO on ITL at 50 ms fails the point; one on TPOT
    at 50 ms does not."""
    t0 = 50.0
    sent = []
    for i in range(100):
        s = i / 20
        r = _rec(i, t0 + s, 0.03, t0 + s + 0.3)
        r.itl_s = [0.005] * 8 + [0.2 if i % 10 == 0 else 0.005]
        sent.append(Sent(r, scheduled_s=s, send_lag_s=0.001))
    run = OpenLoopRun("poisson", Phases(0.5, 4.0, 0.5), t0, sent, rate_per_s=20.0, max_send_lag_s=0.01)
    itl_slo, tpot_slo = Slo(itl_p99_ms=50.0), Slo(tpot_p99_ms=50.0)
    p = RatePoint.of_run(run, server="s", mix="m", cycle=0, position=0, fraction=0.5, slo=tpot_slo, over=OVER)
    assert p.itl_ms_p99 > 50 and p.tpot_ms_p99 == pytest.approx(26.7, abs=0.1) and p.tpot_ms_p50 == pytest.approx(5.0)
    assert [m.split(" ")[1] for m in p.missed(itl_slo)] == ["ITL"] and p.missed(tpot_slo) == []
    assert p.goodput_per_s == pytest.approx(p.achieved_per_s)  # every request's mean within 50 ms
    assert RatePoint.from_json(p.to_json()).tpot_ms_p99 == p.tpot_ms_p99
    # capacity with the TPOT term: interpolated in it, and named
    c = cycle_capacity([dataclass_with(point(r, 20), tpot_ms_p99=t) for r, t in ((2, 20.0), (4, 30.0), (6, 70.0))],
                       tpot_slo, 0)  # fmt: skip
    assert c.capacity_per_s == pytest.approx(5.0) and c.limit == "p99 TPOT"
    assert cycle_capacity([point(2, 20)], tpot_slo, 0).limit == "p99 TPOT"  # a sweep from before TPOT: not measured


def test_the_slo_reads_writes_and_says_its_terms():
    assert Slo(500, 50).text == "p99 TTFT <= 500 ms and p99 ITL <= 50 ms"
    assert Slo(500, tpot_p99_ms=40).text == "p99 TTFT <= 500 ms and p99 TPOT <= 40 ms"
    assert Slo(500, 50).to_json() == {"ttft_p99_ms": 500, "itl_p99_ms": 50}  # as before the TPOT term
    assert Slo.from_json(Slo(500, None, 40).to_json()) == Slo(500, None, 40)
    with pytest.raises(ValueError, match="tpot_p99_ms"):
        Slo()


def test_capacity_is_interpolated_between_the_last_meeting_and_the_first_failing_rate():
    pts = [point(1, 20), point(2, 40), point(4, 80), point(6, 180), point(8, 400)]
    c = cycle_capacity(pts, SLO, 0)
    # p99 TTFT crosses 100 ms a fifth of the way from 80 ms at 4/s to 180 ms at 6/s
    assert c.bound == "" and c.capacity_per_s == pytest.approx(4.4)
    assert (c.last_meeting_per_s, c.first_failing_per_s) == (4, 6)
    assert "TTFT" in c.method and c.limit == "p99 TTFT"


def test_capacity_takes_the_lower_crossing_when_both_bounds_fail():
    pts = [point(1, 20, 5), point(4, 80, 10), point(6, 180, 30)]
    c = cycle_capacity(pts, SLO, 0)
    # TTFT crosses at 4.4; ITL (10 -> 30 ms, bound 20) at 5.0
    assert c.capacity_per_s == pytest.approx(4.4) and c.limit == "p99 TTFT"
    itl = cycle_capacity([point(1, 20, 5), point(4, 30, 10), point(6, 40, 30)], SLO, 0)
    assert itl.capacity_per_s == pytest.approx(5.0) and itl.limit == "p99 ITL"


def test_capacity_stops_at_an_over_saturated_rate_without_interpolating():
    pts = [point(1, 20), point(4, 80), point(6, 90, over="achieved 70 %"), point(8, 60)]
    c = cycle_capacity(pts, SLO, 0)
    assert c.capacity_per_s == 4 and c.bound == "" and "over-saturated" in c.method
    assert c.limit == "over-saturation"


def test_capacity_ignores_a_meeting_rate_above_the_first_failing_one():
    pts = [point(1, 20), point(2, 150), point(4, 80)]
    assert cycle_capacity(pts, SLO, 0).first_failing_per_s == 2


def test_capacity_out_of_the_measured_range_is_a_bound():
    below = cycle_capacity([point(1, 200), point(2, 300)], SLO, 0)
    assert below.bound == "below" and below.capacity_per_s == 1 and below.limit == "p99 TTFT"
    both = cycle_capacity([point(1, 200, 30, over="achieved 70 %")], SLO, 0)
    assert both.limit == "p99 TTFT and p99 ITL and over-saturation"
    above = cycle_capacity([point(1, 20), point(2, 30)], SLO, 0)
    assert above.bound == "at_least" and above.capacity_per_s == 2 and above.limit == ""


def test_a_window_without_requests_is_left_out_not_failed():
    pts = [point(1, NAN, NAN, n=0), point(2, 40), point(4, 180)]
    c = cycle_capacity(pts, SLO, 0)
    assert c.bound == "" and 2 < c.capacity_per_s < 4


def sweep_of(cycles: list[list[RatePoint]]) -> SweepResult:
    probe = point(10, 500)
    probe_json = probe.to_json() | {"shape": "concurrency", "fraction": None, "rate_per_s": None}
    probe = RatePoint.from_json(probe_json)
    pts = [dataclass_with(p, cycle=c) for c, ps in enumerate(cycles) for p in ps]
    return SweepResult("s", "m", 10.0, probe, sorted({p.fraction for p in pts}), pts, len(cycles), "over-saturated")


def dataclass_with(p: RatePoint, **kw: object) -> RatePoint:
    return RatePoint.from_json(p.to_json() | kw)


def test_capacity_interval_is_the_median_interval_over_cycles():
    cycles = [[point(2, 40), point(4, 80 + 5 * k), point(6, 180)] for k in range(6)]
    cap = Capacity.of(sweep_of(cycles), SLO)
    assert cap.n == 6 and cap.coverage >= 0.95
    per = sorted(c.capacity_per_s for c in cap.per_cycle)
    assert cap.lo == per[0] and cap.hi == per[-1]
    assert cap.lo <= cap.capacity_per_s <= cap.hi
    assert cap.censored == 0


def test_rates_too_far_apart_widen_the_interval_instead_of_reading_as_a_tight_one():
    """Six cycles that each meet the SLO at 1/s and over-saturate at 4/s: capacity lies between the two rates in
    every cycle, so the interval is [1, 4], not [1, 1]; interpolated cycles keep their own figures."""
    cap = Capacity.of(sweep_of([[point(1, 20), point(4, 90, over="achieved 70 %")]] * 6), SLO)
    assert (cap.capacity_per_s, cap.lo, cap.hi) == (1, 1, 4)
    assert all(c.upper_per_s == 4 and c.upper == 4 for c in cap.per_cycle)
    mixed = [[point(2, 40), point(4, 80 + 5 * k), point(6, 180)] for k in range(5)]
    mixed.append([point(2, 40), point(4, 80), point(6, 90, over="x")])
    cap = Capacity.of(sweep_of(mixed), SLO)
    assert cap.hi == 6 and cap.lo == 4
    assert [math.isnan(c.upper_per_s) for c in cap.per_cycle] == [True] * 5 + [False]


def test_the_search_range_is_cycle_0s_bracket_widened_by_one_rate_each_way():
    def rng(cycle0: list[RatePoint]) -> tuple[float, float] | None:
        return search_range(sweep_of([cycle0]), SLO)

    # meets at 1, 2, 4; fails at 6 (not over-saturated); over-saturated at 8: from 2 to 8
    assert rng([point(1, 20), point(2, 40), point(4, 80), point(6, 180), point(8, 400, over="x")]) == (0.2, 0.8)
    # cycle 0 stopped at its first failing rate (over-saturated): the configured grid's next rate is the top, so a
    # later cycle whose knee moved above that rate still brackets it; without a grid, or at its end, that rate
    stopped = [point(1, 20), point(2, 40), point(4, 90, over="x")]
    assert search_range(sweep_of([stopped]), SLO, [0.1, 0.2, 0.4, 0.7]) == (0.1, 0.7)
    assert search_range(sweep_of([stopped]), SLO, [0.1, 0.2, 0.4]) == (0.1, 0.4)
    assert rng(stopped) == (0.1, 0.4)
    # the lowest meeting rate is the grid's first: from 0
    assert rng([point(1, 20), point(2, 140), point(4, 300, over="x")]) == (0.0, 0.4)
    # the lowest rate fails: from 0 to the next rate
    assert rng([point(1, 200), point(2, 300, over="x")]) == (0.0, 0.2)
    # every rate meets: nothing to bracket (the later cycles run the grid)
    assert rng([point(1, 20), point(2, 30)]) is None
    # a window without requests is not a rate of the bracket
    assert rng([point(1, NAN, NAN, n=0), point(2, 40), point(4, 180, over="x")]) == (0.0, 0.4)


def test_capacity_of_a_search_is_its_later_cycles():
    """Cycle 0 met at 2/s and failed at 4/s, far apart; the later cycles searched 1-6/s (fractions 0.1-0.6 of a 10/s
    probe). Capacity is theirs alone, each bracketed by its own runs: one whose steps all met ran the top (6/s,
    over-saturated), one whose steps all failed ran the bottom (1/s, meeting); one whose top met too is a bound."""
    cycle0 = [point(1, 20), point(2, 40), point(4, 180), point(6, 400, over="x")]
    all_meet = [point(3.5, 60), point(4.75, 80), point(5.4, 90), point(6, 300, over="x")]
    all_fail = [point(3.5, 160), point(2.25, 120), point(1.6, 110), point(1, 30)]
    sweep = sweep_of([cycle0, all_meet, all_fail])
    sweep.search_range = [0.1, 0.6]
    cap = Capacity.of(sweep, SLO)
    meet, fail = cap.per_cycle  # cycle 0 only found the range: not a cycle of the figure
    assert meet.bound == "" and (meet.capacity_per_s, meet.upper) == (5.4, 6)
    assert fail.bound == "" and fail.last_meeting_per_s == 1 and 1 < fail.capacity_per_s < 1.6
    assert cap.n == 2 and cap.censored == 0 and cap.hi == 6
    top_meets = sweep_of([cycle0, [*all_meet[:3], point(6, 95)]])
    top_meets.search_range = [0.1, 0.6]
    assert Capacity.of(top_meets, SLO).per_cycle[0].bound == "at_least"
    sweep.search_range = [0.0, 0.6]
    back = SweepResult.from_json(json.loads(json.dumps(sweep.to_json())))
    assert (
        back.search_range == [0.0, 0.6]
        and SweepResult.from_json(sweep.to_json() | {"search_range": None}).search_range is None
    )


def test_settings_written_before_the_search_read_back_as_the_grid():
    data = settings(search_steps=5).to_json()
    assert SweepSettings.from_json(data).search_steps == 5
    del data["search_steps"]
    assert SweepSettings.from_json(data).search_steps == 0
    with pytest.raises(TypeError):
        SweepSettings.from_json(data | {"steps": 3})


def test_a_window_holds_at_least_min_window_requests_arrivals_due():
    st = settings(duration_s=8.0, min_window_requests=50)
    assert st.phases_at(2.0).duration_s == 25.0  # 8 s at 2 req/s would hold 16 arrivals due
    assert st.phases_at(10.0).duration_s == 8.0  # 80 due in 8 s: duration_s stands
    assert st.phases_at(2.0).warmup_s == st.warmup_s and st.phases_at(2.0).drain_s == st.drain_s
    assert settings(duration_s=8.0).phases_at(2.0).duration_s == 8.0  # off by default
    # recorded only where it is on: sweeps written before the key existed read as swept with today's settings
    assert "min_window_requests" not in settings().to_json()
    assert SweepSettings.from_json(st.to_json()) == st and SweepSettings.from_json(settings().to_json()) == settings()


def test_settings_written_before_the_ttft_test_read_back_without_it():
    data = settings().to_json()
    assert data["over_saturation"]["ttft_growth_alpha"] == 1.0
    del data["over_saturation"]["ttft_growth_alpha"]
    assert SweepSettings.from_json(data).over_saturation.ttft_growth_alpha == 1.0


def test_records_round_trip_through_json():
    sweep = sweep_of([[point(2, 40), point(4, 80), point(6, 180, over="x")]] * 2)
    back = SweepResult.from_json(json.loads(json.dumps(sweep.to_json())))
    assert json.dumps(back.to_json(), sort_keys=True) == json.dumps(sweep.to_json(), sort_keys=True)
    assert back.points[2].over_saturated == "x" and math.isnan(back.probe.fraction)
    cap = Capacity.of(sweep, SLO)
    cap_back = Capacity.from_json(json.loads(json.dumps(cap.to_json())))
    assert cap_back.per_cycle == cap.per_cycle and cap_back.slo == SLO
    with pytest.raises(ValueError, match="schema"):
        Capacity.from_json(cap.to_json() | {"schema": "lorabench.capacity/0"})


def test_mix_requests_are_the_same_for_every_server():
    conds = {"z": {"adapters": ["a", "b", "c"], "assignment": "zipf", "zipf_s": 1.1}}
    one = MixRequests("s1", conds, "p", 8, lambda a: f"one-{a}", seed=3)("z", 50, "c0", "t")
    two = MixRequests("s2", conds, "p", 8, lambda a: f"two-{a}", seed=3)("z", 50, "c0", "t")
    assert [r.adapter for r in one] == [r.adapter for r in two]
    assert len({r.adapter for r in one}) == 3 and all(r.stream for r in one)
    assert one[0].model == f"one-{one[0].adapter}" and one[0].request_id.startswith("s1/sweep/z/t/")


def _short_sweep(cold_s: float = 0.0, **kw: object) -> tuple[SweepSettings, SweepOutcome]:
    """A short sweep of mix "ab" on the fake server with four slots, 8 tokens 5 ms apart (about 100 requests/s at
    most), at a 50 ms p99 TTFT; ``kw`` overrides the settings; ``cold_s``: the server's first seconds hold every
    request."""
    proc, port = start_in_process(slots=4, delay=0.005, cold_s=cold_s)
    try:
        base: dict[str, object] = {"points": 2, "max_rate_factor": 3.0, "warmup_s": 0.15, "duration_s": 0.6,
                                   "drain_s": 0.05, "probe_concurrency": 16, "settle_s": 0.05, "max_send_lag_ms": 50.0,
                                   "slo": Slo(ttft_p99_ms=50.0, itl_p99_ms=1000.0), "seed": 1}  # fmt: skip
        st = settings(**{**base, **kw})
        source = MixRequests("fake", {"ab": {"adapters": ["a", "b"]}}, "x", 8, lambda a: a, seed=1)
        return st, asyncio.run(sweep_server(f"http://127.0.0.1:{port}", "fake", ["ab"], source, st))
    finally:
        proc.kill()


@pytest.mark.integration
def test_short_sweep_against_a_server_with_slots():
    """Four slots, 8 tokens 5 ms apart: about 100 requests/s at most. The sweep's latency rises with the rate, its
    first cycle stops at the first over-saturated rate (before the grid's end at 2.8x), and capacity at a 50 ms
    p99 TTFT lies between the rates that meet it and those that do not. The seed gives the 10 % rate five and six
    arrivals in its window (cycles 0 and 1)."""
    st, out = _short_sweep(repeats=2)
    (res,) = out.results
    assert res.max_rate_per_s > 0
    first = res.cycle_points(0)
    assert first[-1].over_saturated and not any(p.over_saturated for p in first[:-1])
    assert len(res.fractions) < len(st.fractions()) and res.stop_reason.startswith("over-saturated")
    assert res.cycles == 2 and len(res.points) == 2 * len(res.fractions)
    low, high = first[0], first[-1]
    assert high.ttft_ms_p99 > low.ttft_ms_p99 and high.e2e_ms_p50 > low.e2e_ms_p50
    cap = Capacity.of(res, st.slo)
    assert cap.n == 2 and not cap.censored
    for c in cap.per_cycle:
        assert c.last_meeting_per_s <= c.capacity_per_s < c.first_failing_per_s
    assert res.rates[0] <= cap.capacity_per_s < res.rates[-1]
    assert {r["mix"] for r in out.records} == {"ab"} and any(r["in_window"] for r in out.records)


@pytest.mark.integration
def test_a_cold_servers_probe_is_run_again_until_two_in_a_row_agree():
    """A server that holds its first 1.2 s of requests (longer than a probe's 0.15 + 0.6 + 0.05 s): the first
    probe completes nothing in its window; probes go on until two in a row agree within PROBE_AGREE, the last one
    gives the rate and the others are kept as discarded. The records tell the attempts apart."""
    st, out = _short_sweep(cold_s=1.2, repeats=1)
    (res,) = out.results
    first, *_ = res.discarded_probes
    assert first.achieved_per_s == 0 and first.n_errors == 0
    assert res.max_rate_per_s == res.probe.achieved_per_s > 0 and res.points
    back = SweepResult.from_json(res.to_json())
    assert [p.n_sent for p in back.discarded_probes] == [p.n_sent for p in res.discarded_probes]
    attempts = {r["probe_attempt"] for r in out.records if r["fraction"] is None}
    assert attempts == set(range(1, len(res.discarded_probes) + 2))


def test_probes_agree_within_ten_percent_of_the_later_one():
    assert probes_agree(50.0, 54.0) and probes_agree(54.0, 50.0)
    assert not probes_agree(24.0, 50.0) and not probes_agree(0.0, 0.0) and not probes_agree(0.0, 10.0)


@pytest.mark.integration
def test_a_probe_whose_requests_all_fail_stops_the_sweep_at_once():
    """Every request an HTTP 500: a broken server, not a cold one; one probe, then the error names the server."""
    proc, port = start_in_process(fault="http500", fault_all=True)
    try:
        st = settings(warmup_s=0.1, duration_s=0.3, drain_s=0.05, probe_concurrency=4, settle_s=0.0)
        source = MixRequests("fake", {"ab": {"adapters": ["a", "b"]}}, "x", 8, lambda a: a, seed=1)
        with pytest.raises(SweepError, match=r"server fake, mix ab: the saturation probe completed no request.*failed"):
            asyncio.run(sweep_server(f"http://127.0.0.1:{port}", "fake", ["ab"], source, st))
    finally:
        proc.kill()


def test_a_sweep_without_discarded_probes_writes_no_such_field():
    res = SweepResult("s", "m", 1.0, point(1.0, 10.0), [0.1])
    assert "discarded_probes" not in res.to_json()


@pytest.mark.integration
def test_a_low_rate_run_lengthens_its_window_to_hold_min_window_requests():
    """The same server: its 10 % rate (about 10 requests/s) would have 6 arrivals due in a 0.6 s window; with
    min_window_requests 20 that run's window is 20 / rate long, and holds about that many requests."""
    st, out = _short_sweep(repeats=1, min_window_requests=20)
    (res,) = out.results
    low, high = res.cycle_points(0)[0], res.cycle_points(0)[-1]
    assert low.duration_s == pytest.approx(20 / low.rate_per_s) and low.duration_s > st.duration_s
    assert low.n_window >= 10  # Poisson around 20
    assert high.duration_s == max(st.duration_s, 20 / high.rate_per_s)
    assert out.results[0].settings["min_window_requests"] == 20


@pytest.mark.integration
def test_the_later_cycles_bisect_the_bracket_of_cycle_0():
    """The same server as above with search_steps 3: every later cycle runs three steps inside cycle 0's widened
    bracket, each step halving it (up after a rate that meets the SLO, down after one that fails), and places
    capacity within the range's eighth where it is not a bound."""
    st, out = _short_sweep(repeats=3, search_steps=3)
    (res,) = out.results
    bracket = search_range(
        SweepResult.from_json(res.to_json() | {"points": [p.to_json() for p in res.cycle_points(0)]}),
        st.slo,
        st.fractions(),
    )
    assert tuple(res.search_range or ()) == bracket  # the range the sweep recorded
    assert bracket is not None
    lo, hi = bracket
    for cycle in (1, 2):
        runs = sorted((p for p in res.points if p.cycle == cycle), key=lambda p: p.position)
        steps, end = runs[:3], runs[3:]
        a, b = lo, hi
        for p in steps:  # each step the midpoint of what the steps before it left
            assert p.fraction == pytest.approx((a + b) / 2)
            a, b = (a, p.fraction) if p.measured and p.missed(st.slo) else (p.fraction, b)
        # every step on one side: the range's end on that side, once more
        assert [p.fraction for p in end] == ([hi] if b == hi else [lo] if a == lo and lo > 0 else [])
        c = cycle_capacity(runs, st.slo, cycle)
        if c.bound == "" and not end:
            assert c.first_failing_per_s - c.last_meeting_per_s == pytest.approx((hi - lo) / 8 * res.max_rate_per_s)
    assert res.fractions == sorted(p.fraction for p in res.cycle_points(0))
    assert res.search_range == [lo, hi]
    assert [c.cycle for c in Capacity.of(res, st.slo).per_cycle] == [1, 2]  # cycle 0 only found the range


def test_plots_of_a_sweep_and_its_capacity(tmp_path):
    from lorabench.sweep_plots import capacity_by_config, latency_vs_rate

    cycles = [[point(2, 40), point(4, 80 + 5 * k), point(6, 180, over="x" if k else "")] for k in range(3)]
    sweep = sweep_of(cycles)
    other = SweepResult.from_json(sweep.to_json() | {"server": "t"})
    assert latency_vs_rate([sweep, other], tmp_path / "lat.png", "ttft", SLO) == tmp_path / "lat.png"
    caps = [Capacity.of(sweep, SLO), Capacity.of(other, SLO)]
    assert capacity_by_config(caps, tmp_path / "cap.png") == tmp_path / "cap.png"
    assert (tmp_path / "lat.png").stat().st_size > 1000 and (tmp_path / "cap.png").stat().st_size > 1000
    assert latency_vs_rate([], tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()


def test_the_latency_curve_goes_through_the_searchs_rates_too():
    """Cycle 0 ran the grid (2, 6: over-saturated); the search's cycles ran 3 and 4, twice each: the curve has all
    four rates, each the median of its runs, and a cross only where most runs at that rate were over-saturated."""
    from lorabench.sweep_plots import rate_curve

    cycles = [
        [point(2, 40), point(6, 900, over="x")],
        [point(3, 100), point(4, 300)],
        [point(3, 140), point(4, 500, over="x")],
    ]
    sweep = SweepResult.from_json(sweep_of(cycles).to_json() | {"fractions": [0.2, 0.6]})
    curve = rate_curve(sweep, "ttft_ms")
    assert [c[0] for c in curve] == [2, 3, 4, 6]
    assert [c[2] for c in curve] == [40, 120, 400, 900]  # p99: the median of the runs at each rate
    assert [c[1] for c in curve] == [20, 60, 200, 450]  # p50 likewise
    assert [c[3] for c in curve] == [False, False, False, True]  # 4: one of its two runs over-saturated
