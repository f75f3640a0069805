"""Rate sweeps and capacity at a latency target (issue 29), apart from the job that owns the server's life.

For each adapter mix, a saturation probe first keeps ``probe_concurrency`` requests in flight (closed loop); the
requests it completes per second in its steady-state window are the mix's maximum rate (the probe runs until two in a
row agree within 10 %: a cold server's first batches read low). The sweep's rates are
fractions of it: ``points`` fractions from 10 % to 100 %, then on in the same steps up to ``max_rate_factor``.
Each rate is one open-loop run of Poisson arrivals (``loadgen.arrivals``) and gives one ``RatePoint``.

Repeats are interleaved as method v2 interleaves bursts. Cycle 0 runs each mix's rates in ascending order and
stops the mix at its first over-saturated rate: that rate is the last of the mix's set. What the later cycles
run depends on ``search_steps``:

- 0 (the grid): every later cycle runs the same set, one run of every (mix, rate) cell, its order rotated from
  one cycle to the next (by ``len(cells) // repeats`` places, so that each cell takes places spread over the
  cycle even with few repeats). Capacity can only be placed between two rates of the grid.
- K > 0 (the search): every later cycle bisects each mix's search range K times, one run per step, the mixes
  taking turns step by step (their order rotated from one cycle to the next). The range is cycle 0's bracket
  (its last rate meeting the SLO, its first failing one) widened by one rate of the grid on each side, so that
  a cycle whose capacity moved past cycle 0's still finds it: from the rate below the last meeting one (0 where
  that is the lowest) to the rate above the first failing one, a rate of the configured grid that cycle 0 did not
  run where it stopped there (over-saturated; the first failing one where the grid ends there). A knee that moves
  above a failing rate of cycle 0 is common near saturation (8 s windows on the H200: one cycle of six met every
  step up to the rate cycle 0 found over-saturated), and a range ending there leaves that cycle a bound. A step
  that meets the SLO moves the range up, one that fails moves it down, so each cycle places its capacity within
  the range's width / 2^K, at about the cost of a cycle of the grid. Where every step met the SLO
  the cycle runs the range's top once more (every step failed: its bottom, unless 0), so that it brackets
  capacity with its own runs; capacity is then the search cycles' alone (cycle 0 only found the range). Where
  cycle 0 met the SLO at every rate (nothing to bracket) the later cycles run the grid. The steps' fractions
  differ from cycle to cycle; ``SweepResult.fractions`` stays the grid of cycle 0 (the latency plots' rates).

What one run gives, over-saturation and capacity at the SLO: ``rate_points`` (re-exported here).

Nothing here starts or stops a server; the job passes a base URL and a ``RequestSource``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeVar

import aiohttp

from ..harness import quiet_gc
from ..loadgen.arrivals import Phases, poisson_schedule, run_closed, run_poisson
from ..loadgen.client import CompletionRequest, make_session
from ..loadgen.workload import draw_adapters
from .rate_points import (
    CAPACITY_SCHEMA,
    RATE_POINT_SCHEMA,
    SWEEP_SCHEMA,
    Capacity,
    CycleCapacity,
    OverSaturation,
    RatePoint,
    Slo,
    SweepResult,
    cycle_capacity,
)

__all__ = [
    "CAPACITY_SCHEMA",
    "RATE_POINT_SCHEMA",
    "SWEEP_SCHEMA",
    "Capacity",
    "CycleCapacity",
    "MixRequests",
    "OverSaturation",
    "RatePoint",
    "RequestSource",
    "RunMeter",
    "Slo",
    "SweepError",
    "SweepOutcome",
    "SweepResult",
    "SweepSettings",
    "cycle_capacity",
    "probes_agree",
    "search_range",
    "sweep_server",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


class SweepError(RuntimeError):
    """A sweep that cannot give rates (a probe that completed nothing)."""


@dataclass(frozen=True)
class SweepSettings:
    """A sweep's settings, as the config's ``rate_sweep`` section gives them (schema defaults filled)."""

    points: int
    max_rate_factor: float
    warmup_s: float
    duration_s: float
    drain_s: float
    repeats: int
    probe_concurrency: int
    settle_s: float
    max_send_lag_ms: float
    max_in_flight: int
    over_saturation: OverSaturation
    slo: Slo
    seed: int
    request_timeout_s: float
    search_steps: int = 0
    min_window_requests: int = 0  # a run's window is long enough for this many arrivals due at its rate (0: off)

    @classmethod
    def from_config(cls, section: dict[str, Any], seed: int, request_timeout_s: float) -> SweepSettings:
        os_ = section["over_saturation"]
        return cls(
            points=int(section["points"]),
            max_rate_factor=float(section["max_rate_factor"]),
            warmup_s=float(section["warmup_s"]),
            duration_s=float(section["duration_s"]),
            drain_s=float(section["drain_s"]),
            repeats=int(section["repeats"]),
            probe_concurrency=int(section["probe_concurrency"]),
            settle_s=float(section["settle_s"]),
            max_send_lag_ms=float(section["max_send_lag_ms"]),
            max_in_flight=int(section["max_in_flight"]),
            over_saturation=OverSaturation(
                float(os_["min_achieved_fraction"]),
                float(os_["ttft_growth_factor"]),
                float(os_["ttft_growth_min_ms"]),
                float(os_["ttft_growth_alpha"]),
            ),
            slo=Slo.from_json(section["slo"]),
            seed=int(seed),
            request_timeout_s=float(request_timeout_s),
            search_steps=int(section["search_steps"]),
            min_window_requests=int(section.get("min_window_requests", 0)),
        )

    @property
    def phases(self) -> Phases:
        return Phases(self.warmup_s, self.duration_s, self.drain_s)

    def phases_at(self, rate_per_s: float) -> Phases:
        """A run's phases at ``rate_per_s``: the window ``duration_s`` long, or longer where that many seconds
        would hold fewer than ``min_window_requests`` arrivals due (its p99 would be about its slowest request)."""
        if self.min_window_requests <= 0 or not rate_per_s > 0:
            return self.phases
        return Phases(self.warmup_s, max(self.duration_s, self.min_window_requests / rate_per_s), self.drain_s)

    def fractions(self) -> list[float]:
        """Fractions of the probe's rate, ascending: ``points`` from 0.1 to 1.0, then on in the same steps up to
        ``max_rate_factor``."""
        if self.points < 2:
            raise ValueError("rate_sweep.points: at least 2")
        step = 0.9 / (self.points - 1)
        out = [round(0.1 + i * step, 6) for i in range(self.points)]
        k = 1
        while 1.0 + k * step <= self.max_rate_factor + 1e-9:
            out.append(round(1.0 + k * step, 6))
            k += 1
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["slo"] = self.slo.to_json()
        if not self.min_window_requests:
            # off: left out, so that sweeps recorded before the key existed read as swept with these settings
            del d["min_window_requests"]
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepSettings:
        """``to_json``'s object back (an unknown or missing key is an error, but for ``search_steps``: sweeps
        written before it existed ran the grid)."""
        d = dict(data)
        d.setdefault("search_steps", 0)
        d["over_saturation"] = OverSaturation(**d["over_saturation"])
        d["slo"] = Slo.from_json(d["slo"])
        return cls(**d)


# (mix, n, draw key, tag) -> n requests: the same draw key gives the same adapters in the same order; the tag
# makes the request ids of one run unique.
RequestSource = Callable[[str, int, str, str], list[CompletionRequest]]


@dataclass(frozen=True)
class MixRequests:
    """A ``RequestSource``: the workload's prompt and length, adapters drawn by each mix's assignment strategy
    from ``seed``, the mix and the draw key (not the server: every server gets the same sequence), named for
    the server by ``model_of`` (e.g. ``lambda a: engine.request_model(spec, a)``)."""

    server: str
    conditions: dict[str, dict[str, Any]]
    prompt: str
    max_tokens: int
    model_of: Callable[[str], str]
    seed: int
    temperature: float = 0.0
    ignore_eos: bool = True

    def __call__(self, mix: str, n: int, key: str, tag: str) -> list[CompletionRequest]:
        if mix not in self.conditions:
            raise KeyError(f"rate_sweep.mixes: unknown condition {mix!r}")
        names = draw_adapters(self.conditions[mix], n, random.Random(f"{self.seed}/{mix}/{key}"), f"conditions.{mix}")
        return [
            CompletionRequest(
                request_id=f"{self.server}/sweep/{mix}/{tag}/{i:05d}",
                adapter=a,
                model=self.model_of(a),
                prompt=self.prompt,
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                ignore_eos=self.ignore_eos,
                stream=True,
            )
            for i, a in enumerate(names)
        ]


# The saturation probe runs until two in a row agree within PROBE_AGREE (of the later one), at most PROBE_ATTEMPTS
# times: a cold server's first batches read far below its rate (``_Sweep.probe``).
PROBE_ATTEMPTS = 5
PROBE_AGREE = 0.10


def probes_agree(earlier: float, later: float) -> bool:
    """Two probe rates in a row agree where they are within PROBE_AGREE of the later one (neither zero)."""
    return earlier > 0 and later > 0 and abs(later - earlier) <= PROBE_AGREE * later


class RunMeter(Protocol):
    """What the server's host did over one run (``RatePoint.host``): ``start`` before it, ``stop`` with what
    ``start`` gave after it, returning the figures it could read (``front_end_cpu``, ``gpu_busy_pct``)."""

    def start(self) -> Any: ...

    def stop(self, token: Any) -> dict[str, float]: ...


@dataclass
class SweepOutcome:
    """What one server's sweep gives: one result per mix, and one row per request (records.jsonl)."""

    results: list[SweepResult]
    records: list[dict[str, Any]]

    def capacities(self, slo: Slo) -> list[Capacity]:
        return [Capacity.of(r, slo) for r in self.results]


def _rotated(items: list[T], k: int) -> list[T]:
    k = k % len(items) if items else 0
    return items[k:] + items[:k]


@dataclass
class _Sweep:
    """One server's sweep under way (``sweep_server``): the runs, their points and rows."""

    session: aiohttp.ClientSession
    base_url: str
    server: str
    source: RequestSource
    settings: SweepSettings
    gc_mode: str
    meter: RunMeter | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, SweepResult] = field(default_factory=dict)
    runs: int = 0  # runs done, for the progress lines

    async def probe(self, mix: str) -> SweepResult:
        """The saturation probe of one mix: closed loop at ``probe_concurrency``; its rate is the mix's maximum.

        A server's first requests can be far slower than its later ones (an engine compiling kernels on its first
        batches: SGLang's first start on an H200 completed none of its first 64 requests within the probe's 8 s
        window, and another machine's first probe read 23.9 req/s). So the probe runs until two in a row agree
        within ``PROBE_AGREE`` of the later one, at most ``PROBE_ATTEMPTS`` times, and the last one gives the rate;
        the others are kept in ``discarded_probes``. A probe that completes nothing while requests failed stops
        the sweep (a broken server, not a cold one)."""
        st, phases = self.settings, self.settings.phases
        runs: list[RatePoint] = []
        agreed = False
        for attempt in range(1, PROBE_ATTEMPTS + 1):
            tag = "probe" if attempt == 1 else f"probe-{attempt}"
            reqs = self.source(mix, max(4 * st.probe_concurrency, 64), tag, tag)
            token = self.meter.start() if self.meter else None
            with quiet_gc(self.gc_mode):
                run = await run_closed(self.session, self.base_url, reqs, st.probe_concurrency, phases,
                                       st.request_timeout_s, st.max_in_flight)  # fmt: skip
            probe = RatePoint.of_run(run, server=self.server, mix=mix, cycle=0, position=-1, fraction=float("nan"),
                                     slo=st.slo, over=st.over_saturation)  # fmt: skip
            if self.meter:
                probe.host = self.meter.stop(token)
            self.records.extend(run.rows(server=self.server, mix=mix, cycle=0, fraction=None, rate_per_s=None,
                                         probe_attempt=attempt))  # fmt: skip
            runs.append(probe)
            await asyncio.sleep(st.settle_s)
            agreed = len(runs) >= 2 and probes_agree(runs[-2].achieved_per_s, probe.achieved_per_s)
            if agreed or (not probe.achieved_per_s > 0 and probe.n_errors):
                break
            log.info("%s/%s probe %d of at most %d at concurrency %d: %.2f req/s%s", self.server, mix, attempt,
                     PROBE_ATTEMPTS, st.probe_concurrency, probe.achieved_per_s,
                     "" if attempt == 1 else f" against {runs[-2].achieved_per_s:.2f} before it")  # fmt: skip
        if not probe.achieved_per_s > 0:
            tries = f" (the last of {len(runs)} probes)" if len(runs) > 1 else ""
            raise SweepError(
                f"rate_sweep: server {self.server}, mix {mix}: the saturation probe{tries} completed no request in "
                f"its {phases.duration_s:g} s window ({probe.n_sent} sent, {probe.n_errors} failed): no rate to sweep"
            )
        rates = ", ".join(f"{p.achieved_per_s:.2f}" for p in runs)
        if not agreed:
            log.warning("%s/%s: no two probes in a row within %.0f %% of each other in %d: the last one's rate is "
                        "used (%s req/s)", self.server, mix, 100 * PROBE_AGREE, len(runs), rates)  # fmt: skip
        log.info("%s/%s probe at concurrency %d: %.2f req/s (%d probes: %s)", self.server, mix, st.probe_concurrency,
                 probe.achieved_per_s, len(runs), rates)  # fmt: skip
        return SweepResult(self.server, mix, probe.achieved_per_s, probe, [], settings=st.to_json(),
                           discarded_probes=runs[:-1])  # fmt: skip

    async def measure(self, mix: str, cycle: int, position: int, fraction: float, of: str) -> RatePoint:
        """One open-loop run of Poisson arrivals at ``fraction`` of the mix's probe rate (``of``: its place in
        the sweep, for the log)."""
        st = self.settings
        rate = fraction * self.results[mix].max_rate_per_s
        phases = st.phases_at(rate)
        schedule = poisson_schedule(rate, phases.total_s, f"{st.seed}/{mix}/{cycle}")
        reqs = self.source(mix, len(schedule), f"c{cycle}", f"c{cycle}/f{fraction:g}")
        token = self.meter.start() if self.meter else None
        with quiet_gc(self.gc_mode):
            run = await run_poisson(self.session, self.base_url, reqs, schedule, phases, st.request_timeout_s,
                                    st.max_send_lag_ms / 1000, st.max_in_flight, rate_per_s=rate)  # fmt: skip
        point = RatePoint.of_run(run, server=self.server, mix=mix, cycle=cycle, position=position, fraction=fraction,
                                 slo=st.slo, over=st.over_saturation)  # fmt: skip
        if self.meter:
            point.host = self.meter.stop(token)
        self.records.extend(run.rows(server=self.server, mix=mix, cycle=cycle, fraction=fraction, rate_per_s=rate))
        self.runs += 1
        log.info(
            "%s/%s cycle %d/%d, %s: %.0f %% (%.2f req/s): achieved %.2f req/s, p99 TTFT %.0f ms, p99 ITL %.1f ms%s%s",
            self.server, mix, cycle + 1, st.repeats, of, 100 * fraction, rate, point.achieved_per_s,
            point.ttft_ms_p99, point.itl_ms_p99,
            f"; over-saturated: {point.over_saturated}" if point.over_saturated else "",
            f"; client-bound: {point.client_bound}" if point.client_bound else "",
        )  # fmt: skip
        await asyncio.sleep(st.settle_s)
        return point

    async def first_cycle(self, mix: str) -> None:
        """Cycle 0 of one mix: its rates ascending, up to the first over-saturated one (which fixes its rates)."""
        st = self.settings
        res = self.results[mix] = await self.probe(mix)
        grid = st.fractions()
        stop = ""
        for pos, fraction in enumerate(grid):
            point = await self.measure(mix, 0, pos, fraction, f"rate {pos + 1} of at most {len(grid)}")
            res.points.append(point)
            res.fractions.append(fraction)
            if point.over_saturated:
                stop = f"over-saturated at {100 * fraction:.0f} % of the probe's rate: {point.over_saturated}"
                break
        res.stop_reason = stop or f"no over-saturation up to {st.max_rate_factor:g}x the probe's rate"
        log.info("%s/%s: rates fixed after cycle 0: %s", self.server, mix, res.stop_reason)

    async def later_cycles(self, mixes: list[str]) -> None:
        """Cycles 1.. : the search where ``search_steps`` asks for it and cycle 0 bracketed capacity, else the
        grid: every (mix, rate) cell once each, the order rotated from one cycle to the next."""
        st = self.settings
        grid = st.fractions()
        found = {m: search_range(self.results[m], st.slo, grid) for m in mixes} if st.search_steps > 0 else {}
        ranges = {m: r for m, r in found.items() if r is not None}
        searched = [m for m in mixes if m in ranges]
        for m in searched:
            lo, hi = ranges[m]
            self.results[m].search_range = [lo, hi]
            log.info("%s/%s: later cycles bisect %.0f-%.0f %% of the probe's rate %d times", self.server, m,
                     100 * lo, 100 * hi, st.search_steps)  # fmt: skip
        cells = [(mix, f) for mix in mixes if mix not in searched for f in self.results[mix].fractions]
        stride = max(1, len(cells) // st.repeats)
        for cycle in range(1, st.repeats):
            pos = 0
            for pos, (mix, fraction) in enumerate(_rotated(cells, cycle * stride)):
                point = await self.measure(mix, cycle, pos, fraction, f"run {pos + 1} of {len(cells)}")
                self.results[mix].points.append(point)
            if searched:
                await self.search_cycle(_rotated(searched, cycle), ranges, cycle, pos + 1 if cells else 0)

    async def search_cycle(
        self, mixes: list[str], ranges: dict[str, tuple[float, float]], cycle: int, start: int
    ) -> None:
        """One cycle of the search: ``search_steps`` bisection steps of each mix's range, the mixes in turn; then,
        for a mix whose steps all met the SLO, one run at the range's top (all failed: at its bottom, unless 0), so
        that the cycle brackets capacity with its own runs, not with cycle 0's."""
        st = self.settings
        bounds = dict(ranges)
        pos = start
        for step in range(st.search_steps):
            for mix in mixes:
                lo, hi = bounds[mix]
                fraction = round((lo + hi) / 2, 6)
                point = await self.measure(mix, cycle, pos, fraction, f"search step {step + 1} of {st.search_steps}")
                self.results[mix].points.append(point)
                pos += 1
                # a window that drew no request says nothing against the rate: the search moves up past it
                bounds[mix] = (lo, fraction) if point.measured and point.missed(st.slo) else (fraction, hi)
        for mix in mixes:
            (lo0, hi0), (lo, hi) = ranges[mix], bounds[mix]
            end = hi0 if hi == hi0 else lo0 if lo == lo0 and lo0 > 0 else None
            if end is not None:
                point = await self.measure(mix, cycle, pos, end, "the range's end (every step on one side of it)")
                self.results[mix].points.append(point)
                pos += 1


def search_range(result: SweepResult, slo: Slo, grid: list[float] | None = None) -> tuple[float, float] | None:
    """The fractions of the probe's rate the search bisects after cycle 0 (the module's docstring): cycle 0's
    bracket widened by one rate of its grid on each side, above its first failing rate the next of ``grid`` (the
    configured fractions) where cycle 0 stopped there; None where no rate of cycle 0 fails the SLO."""
    pts = sorted((p for p in result.cycle_points(0) if p.measured), key=lambda p: p.fraction)
    fail = next((i for i, p in enumerate(pts) if p.missed(slo)), None)
    if fail is None:
        return None
    lo = pts[fail - 2].fraction if fail >= 2 else 0.0
    if fail + 1 < len(pts):
        return lo, pts[fail + 1].fraction
    above = [f for f in grid or [] if f > pts[fail].fraction + 1e-9]
    return lo, min(above) if above else pts[fail].fraction


async def sweep_server(
    base_url: str,
    server: str,
    mixes: list[str],
    source: RequestSource,
    settings: SweepSettings,
    api_key: str | None = None,
    gc_mode: str = "freeze",
    meter: RunMeter | None = None,
) -> SweepOutcome:
    """Probe, then sweep every mix on the server now serving at ``base_url`` (the module's docstring); the
    garbage collector quiet during each run as ``gc_mode`` says (``harness.quiet_gc``); ``meter``: what the
    server's host did over each run."""
    async with make_session(settings.max_in_flight, api_key) as session:
        sweep = _Sweep(session, base_url, server, source, settings, gc_mode, meter)
        for mix in mixes:
            await sweep.first_cycle(mix)
        await sweep.later_cycles(mixes)
    for r in sweep.results.values():
        r.cycles = settings.repeats
    return SweepOutcome([sweep.results[m] for m in mixes], sweep.records)
