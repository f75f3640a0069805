"""Open-loop load shapes: the seeded Poisson schedule, the steady-state window, send lag and the client-bound flag
(unit), and runs against the fake server (integration)."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from lorabench.loadgen.arrivals import OpenLoopRun, Phases, Sent, percentile, poisson_schedule, run_closed, run_poisson
from lorabench.loadgen.client import CompletionRequest, RequestRecord, make_session

from ..support.fake_server import start_in_process


def test_schedule_is_seeded_and_reproducible():
    a = poisson_schedule(20.0, 10.0, "7/mix/0")
    assert a == poisson_schedule(20.0, 10.0, "7/mix/0")
    assert a != poisson_schedule(20.0, 10.0, "7/mix/1")
    assert a == sorted(a) and 0 <= a[0] and a[-1] < 10.0


def test_schedule_honours_the_rate():
    """20,000 arrivals (a fixed seed, so the test cannot flake): their count is Poisson, sd sqrt(n) = 0.7 %; the
    gaps are exponential, so their coefficient of variation is 1."""
    rate, span = 100.0, 200.0
    sched = poisson_schedule(rate, span, "rate-check")
    n = len(sched)
    assert abs(n / span - rate) / rate < 0.03
    gaps = [b - a for a, b in zip(sched, sched[1:], strict=False)]
    assert abs(statistics.fmean(gaps) * rate - 1) < 0.03
    assert abs(statistics.pstdev(gaps) / statistics.fmean(gaps) - 1) < 0.05


def test_schedule_at_another_rate_is_the_same_arrivals_scaled():
    slow = poisson_schedule(5.0, 10.0, "s")
    fast = poisson_schedule(10.0, 10.0, "s")
    assert len(fast) > len(slow)
    assert fast[: len(slow)] == pytest.approx([t / 2 for t in slow])


def test_schedule_rejects_a_rate_of_zero():
    with pytest.raises(ValueError, match="rate_per_s"):
        poisson_schedule(0.0, 1.0, "s")


def test_percentile_interpolates_between_order_statistics():
    vals = [float(v) for v in range(1, 101)]
    assert percentile(vals, 50) == pytest.approx(50.5)
    assert percentile(vals, 99) == pytest.approx(99.01)
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) != percentile([], 50)  # NaN


def rec(start: float, end: float, ok: bool = True, ttft: float = 0.01) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{start}",
        model="m",
        adapter="a",
        start_s=start,
        end_s=end,
        latency_s=end - start,
        ttft_s=ttft,
        completion_tokens=4,
        error="" if ok else "HTTP 500: boom",
    )


T0 = 1000.0


def test_window_keeps_requests_started_after_the_ramp_and_finished_before_the_drain():
    phases = Phases(warmup_s=1.0, duration_s=2.0, drain_s=1.0)  # window [1, 3] s after the start
    sent = [
        Sent(rec(T0 + 0.5, T0 + 1.5), scheduled_s=0.5),  # started in the ramp: out; finished in the window
        Sent(rec(T0 + 1.2, T0 + 1.4), scheduled_s=1.2),  # in
        Sent(rec(T0 + 2.0, T0 + 2.9, ok=False), scheduled_s=2.0),  # in the window, failed
        Sent(rec(T0 + 2.5, T0 + 3.2), scheduled_s=2.5),  # finished in the drain: out
        Sent(rec(T0 + 3.5, T0 + 3.6), scheduled_s=3.5),  # in the drain: out
    ]
    run = OpenLoopRun("poisson", phases, T0, sent)
    assert [r.start_s - T0 for r in run.window()] == pytest.approx([1.2, 2.0])
    assert [r.start_s - T0 for r in run.completed_in_window()] == pytest.approx([0.5, 1.2])  # ok, ended inside
    assert [s.record.start_s - T0 for s in run.started_in_window()] == pytest.approx([1.2, 2.0, 2.5])
    assert run.scheduled_in_window() == 3
    rows = run.rows(server="s")
    assert [r["in_window"] for r in rows] == [False, True, True, False, False]
    assert rows[0]["server"] == "s" and rows[0]["shape"] == "poisson"


def test_arrivals_due_moved_by_the_latency_are_what_a_server_keeping_pace_finishes_in_the_window():
    """Each request 0.45 s long, arrivals bunched at the window's end (as Poisson arrivals can be): of the 10 due
    in the window [1, 3) s, 5 end after it, and 2 of the ramp end inside it; moved 0.45 s earlier, the arrivals
    due are exactly those that finished in the window, so that a server keeping pace is not taken for one
    falling behind."""
    phases = Phases(warmup_s=1.0, duration_s=2.0, drain_s=1.0)
    due = [0.7, 0.8, 1.1, 1.6, 2.0, 2.2, 2.5, 2.6, 2.7, 2.8, 2.9, 2.95]
    run = OpenLoopRun("poisson", phases, T0, [Sent(rec(T0 + t, T0 + t + 0.45), scheduled_s=t) for t in due])
    assert run.scheduled_in_window() == 10 and len(run.completed_in_window()) == 7
    assert run.scheduled_in_window(0.45) == 7
    assert run.scheduled_in_window(5.0) == 4  # moved at most to the run's start: due in [0, 2) s


def test_send_lag_beyond_the_threshold_flags_the_run_client_bound():
    phases = Phases(0.0, 1.0, 0.0)
    sent = [Sent(rec(T0 + i / 10, T0 + i / 10 + 0.05), scheduled_s=i / 10, send_lag_s=0.001) for i in range(10)]
    run = OpenLoopRun("poisson", phases, T0, sent, max_send_lag_s=0.01, connection_limit=64, peak_in_flight=3)
    assert run.client_bound == ""
    sent[-1].send_lag_s = 0.2
    assert "send lag p99" in run.client_bound
    run.peak_in_flight = 65
    assert "connections" in run.client_bound


@pytest.fixture(scope="module")
def slots_server():
    proc, port = start_in_process(slots=2, delay=0.005)
    yield f"http://127.0.0.1:{port}"
    proc.kill()


def reqs(n: int, tokens: int = 4) -> list[CompletionRequest]:
    return [CompletionRequest(f"r{i}", "a", "m", "x", tokens) for i in range(n)]


@pytest.mark.integration
def test_poisson_run_sends_on_schedule_and_records_lag(slots_server):
    phases = Phases(0.1, 0.4, 0.1)
    schedule = poisson_schedule(40.0, phases.total_s, "run")

    async def go() -> OpenLoopRun:
        async with make_session(64) as s:
            return await run_poisson(s, slots_server, reqs(len(schedule)), schedule, phases, 10, 0.05, 64, 40.0)

    run = asyncio.run(go())
    assert len(run.sent) == len(schedule)
    assert [s.scheduled_s for s in run.sent] == schedule
    lags = run.send_lags_s()
    assert len(lags) == len(schedule) and min(lags) > -0.005  # never sent before it was due
    assert run.rate_per_s == 40.0 and run.window()
    assert all(s.record.ok for s in run.sent if not s.cut_at_end)


@pytest.mark.integration
def test_poisson_run_cuts_what_is_in_flight_at_its_end(slots_server):
    """Two slots, 400 tokens 5 ms apart (2 s a request): ten requests at once queue for 10 s, far beyond the run's
    0.3 s; those still in flight at the end are cut there and marked (the margin leaves a busy host's event loop
    seconds)."""
    phases = Phases(0.0, 0.2, 0.1)
    schedule = [0.0] * 10

    async def go() -> OpenLoopRun:
        async with make_session(64) as s:
            return await run_poisson(s, slots_server, reqs(10, 400), schedule, phases, 10, 0.05, 64)

    run = asyncio.run(go())
    cut = [s for s in run.sent if s.cut_at_end]
    assert cut and all("timeout" in s.record.error for s in cut)
    assert max(s.record.end_s for s in run.sent) - run.t0 < phases.total_s + 3.0


@pytest.mark.integration
def test_closed_run_keeps_n_in_flight_and_windows_them(slots_server):
    phases = Phases(0.1, 1.0, 0.05)  # a window of 50 requests' length: some complete in it on a busy host too

    async def go() -> OpenLoopRun:
        async with make_session(8) as s:
            return await run_closed(s, slots_server, reqs(8), 4, phases, 10, 8)

    run = asyncio.run(go())
    assert run.shape == "concurrency" and run.concurrency == 4
    assert run.completed_in_window() and run.client_bound == ""
    assert all(s.send_lag_s != s.send_lag_s for s in run.sent)  # NaN: a closed loop has no schedule
