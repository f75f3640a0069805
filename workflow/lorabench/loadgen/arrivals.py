"""Open-loop load shapes: Poisson arrivals at a given rate, and a fixed number of requests in flight (closed loop).

A run has three phases: a warm-up (the ramp), the steady-state window, and a drain during which the load goes on
so that the window's last requests do not see it fall off. The window keeps the requests that started after the
ramp and finished before the drain (``OpenLoopRun.window``); throughput counts the requests that finished inside
the window (``completed_in_window``), which at a steady state is the served rate whatever the latency.

Poisson arrivals are generated up front from a seed (``poisson_schedule``): the seed's arrivals of a unit-rate
process, scaled by 1/rate. The schedule at a rate is therefore the same for every server, and arrival i is the
same (scaled) arrival at every rate. The client must not delay sending: each request's send lag (when it was
actually sent against when it was due) is recorded, and a run whose 99th percentile lag exceeds a threshold, or
whose requests waited for one of the client's connections, is flagged as client-bound: its latencies then
include the client's own queue, not only the server's.

Requests still in flight when a Poisson run ends are cut there (their timeout is the time left in the run): they
cannot belong to the window, and waiting for an over-saturated server's backlog could take without end.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .client import CompletionRequest, RequestRecord, run_concurrency, send_request

LEAD_S = 0.05  # the first arrival is due this long after the run starts, so that it is not late by construction


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` by linear interpolation between order statistics (numpy's
    default); NaN for no values. Infinite values sort last."""
    vals = sorted(v for v in values if not math.isnan(v))
    if not vals:
        return float("nan")
    pos = (len(vals) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    if vals[hi] == vals[lo]:
        return vals[lo]
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def poisson_schedule(rate_per_s: float, span_s: float, seed: str) -> list[float]:
    """Send times (seconds from the run's start) of a Poisson process at ``rate_per_s`` over [0, ``span_s``):
    exponential inter-arrival times drawn from ``random.Random(seed)`` at rate 1, scaled by 1/rate."""
    if not rate_per_s > 0:
        raise ValueError(f"poisson_schedule: rate_per_s must be > 0, got {rate_per_s!r}")
    rng = random.Random(seed)
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(1.0)
        at = t / rate_per_s
        if at >= span_s:
            return out
        out.append(at)


@dataclass(frozen=True)
class Phases:
    """A run's warm-up (ramp), steady-state window and drain, in seconds; the window is [warmup_s, warmup_s +
    duration_s] from the run's start."""

    warmup_s: float
    duration_s: float
    drain_s: float

    def __post_init__(self) -> None:
        if self.warmup_s < 0 or self.drain_s < 0 or not self.duration_s > 0:
            raise ValueError(f"Phases: warm-up and drain must be >= 0 and the window > 0, got {self}")

    @property
    def total_s(self) -> float:
        return self.warmup_s + self.duration_s + self.drain_s

    @property
    def window(self) -> tuple[float, float]:
        return self.warmup_s, self.warmup_s + self.duration_s


@dataclass
class Sent:
    """One request of a run: its record, when it was due and how late it was sent (seconds; NaN in a closed
    loop, which has no schedule), and whether the run's end cut it."""

    record: RequestRecord
    scheduled_s: float = float("nan")
    send_lag_s: float = float("nan")
    cut_at_end: bool = False


@dataclass
class OpenLoopRun:
    """The requests of one run and where they fall in its phases. ``t0`` is the run's start (perf_counter)."""

    shape: str  # "poisson" or "concurrency"
    phases: Phases
    t0: float
    sent: list[Sent]
    rate_per_s: float = float("nan")  # the offered rate (poisson)
    concurrency: int = 0  # requests in flight (concurrency)
    peak_in_flight: int = 0
    connection_limit: int = 0  # the client's connection pool
    max_send_lag_s: float = float("inf")  # client-bound beyond this 99th percentile send lag
    notes: list[str] = field(default_factory=list)

    def offset(self, t: float) -> float:
        return t - self.t0

    def started_in_window(self) -> list[Sent]:
        w0, w1 = self.phases.window
        return [s for s in self.sent if w0 <= self.offset(s.record.start_s) < w1]

    def window(self) -> list[RequestRecord]:
        """The steady-state window: requests that started after the ramp and finished before the drain."""
        w0, w1 = self.phases.window
        return [
            s.record for s in self.sent if w0 <= self.offset(s.record.start_s) and self.offset(s.record.end_s) <= w1
        ]

    def completed_in_window(self) -> list[RequestRecord]:
        """Successful requests that finished inside the window, wherever they started (the served rate)."""
        w0, w1 = self.phases.window
        return [s.record for s in self.sent if s.record.ok and w0 <= self.offset(s.record.end_s) <= w1]

    def scheduled_in_window(self, shift_s: float = 0.0) -> int:
        """Arrivals due inside the window (poisson): the offered load the window actually drew. With ``shift_s``,
        those due in the window moved that much earlier (at most to the run's start): with a request taking about
        ``shift_s`` from arrival to its end, the requests a server that keeps pace finishes inside the window."""
        w0, w1 = self.phases.window
        shift = min(max(shift_s, 0.0), w0)
        return sum(1 for s in self.sent if w0 - shift <= s.scheduled_s < w1 - shift)

    def send_lags_s(self) -> list[float]:
        return [s.send_lag_s for s in self.sent if not math.isnan(s.send_lag_s)]

    @property
    def client_bound(self) -> str:
        """Why the client, not the server, may have set the pace ("" where nothing says so)."""
        reasons = []
        p99 = percentile(self.send_lags_s(), 99)
        if p99 > self.max_send_lag_s:
            reasons.append(f"send lag p99 {1000 * p99:.1f} ms > {1000 * self.max_send_lag_s:g} ms")
        if self.connection_limit and self.peak_in_flight > self.connection_limit:
            reasons.append(
                f"{self.peak_in_flight} requests in flight, more than the client's {self.connection_limit} "
                "connections (the others waited in the client)"
            )
        return "; ".join(reasons)

    def rows(self, **extra: Any) -> list[dict[str, Any]]:
        """One row per request, as the client records it plus its place in the run (for records.jsonl)."""
        w0, w1 = self.phases.window
        out = []
        for s in self.sent:
            start, end = self.offset(s.record.start_s), self.offset(s.record.end_s)
            out.append(
                {
                    **extra,
                    **s.record.to_row(),
                    "shape": self.shape,
                    "scheduled_s": s.scheduled_s,
                    "send_lag_s": s.send_lag_s,
                    "start_offset_s": start,
                    "end_offset_s": end,
                    "in_window": w0 <= start and end <= w1,
                    "cut_at_end": s.cut_at_end,
                }
            )
        return out


async def run_poisson(
    session: aiohttp.ClientSession,
    base_url: str,
    requests: list[CompletionRequest],
    schedule: list[float],
    phases: Phases,
    timeout_s: float,
    max_send_lag_s: float,
    connection_limit: int = 0,
    rate_per_s: float = float("nan"),
) -> OpenLoopRun:
    """Send ``requests[i]`` at ``schedule[i]`` seconds from the start, whatever is still in flight (open loop),
    and cut what is still in flight when the run's phases end. ``connection_limit`` is the session's pool size
    (for the client-bound check); ``rate_per_s`` the rate the schedule was drawn at (recorded)."""
    if len(requests) < len(schedule):
        raise ValueError(f"run_poisson: {len(requests)} requests for {len(schedule)} arrivals")
    perf = time.perf_counter
    t0 = perf() + LEAD_S
    end = t0 + phases.total_s
    run = OpenLoopRun(
        "poisson",
        phases,
        t0,
        [],
        rate_per_s=rate_per_s,
        connection_limit=connection_limit,
        max_send_lag_s=max_send_lag_s,
    )
    in_flight = 0

    async def one(req: CompletionRequest, due_s: float) -> Sent:
        nonlocal in_flight
        in_flight += 1
        run.peak_in_flight = max(run.peak_in_flight, in_flight)
        try:
            left = end - perf()
            cut = left < timeout_s
            rec = await send_request(session, base_url, req, max(min(timeout_s, left), 1e-3))
        finally:
            in_flight -= 1
        return Sent(rec, due_s, rec.start_s - (t0 + due_s), cut and rec.error.startswith("timeout"))

    tasks: list[asyncio.Task[Sent]] = []
    for req, due_s in zip(requests, schedule, strict=False):
        delay = t0 + due_s - perf()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(req, due_s)))
    run.sent = list(await asyncio.gather(*tasks))
    return run


async def run_closed(
    session: aiohttp.ClientSession,
    base_url: str,
    requests: list[CompletionRequest],
    concurrency: int,
    phases: Phases,
    timeout_s: float,
    connection_limit: int = 0,
) -> OpenLoopRun:
    """Keep ``concurrency`` requests in flight for the run's phases (closed loop, ``client.run_concurrency``,
    cycling through ``requests``); the requests in flight when it ends are waited for, not cut."""
    t0 = time.perf_counter()
    records = await run_concurrency(session, base_url, requests, concurrency, timeout_s, duration_s=phases.total_s)
    records.sort(key=lambda r: r.start_s)
    return OpenLoopRun(
        "concurrency",
        phases,
        t0,
        [Sent(r) for r in records],
        concurrency=concurrency,
        peak_in_flight=concurrency,
        connection_limit=connection_limit,
    )
