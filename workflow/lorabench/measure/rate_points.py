"""The records of a rate sweep and capacity at a latency target (``sweep`` runs the sweep): a run's figures
(``RatePoint``), a mix's sweep (``SweepResult``), capacity at the SLO (``Capacity``).

Over-saturation (``OverSaturation.judge``), either rule:

- the rate rule: fewer requests completed in the window than ``min_achieved_fraction`` of the arrivals that a
  server keeping pace finishes in it (those due in the window moved earlier by the median end-to-end latency of
  the requests finished in it, so that the requests still in flight at the window's end are not taken for a
  backlog: they are matched by those that arrived before it and finished in it), and at least ``MIN_SHORTFALL``
  fewer: the server no longer keeps up, its queue grows;
- the TTFT rule (GuideLLM's signal of a growing queue): the median TTFT of the last third of the window's
  requests (by start) is more than ``ttft_growth_factor`` times that of the first third, and at least
  ``ttft_growth_min_ms`` more, and the last third's TTFTs are larger than the first third's beyond chance: a
  one-sided Mann-Whitney test (normal approximation, ties averaged) gives p <= ``ttft_growth_alpha``. A request
  that got no first token before the run ended counts as infinitely late. The test is there for the windows of
  a few requests: TTFTs that are a mix of quick requests and slow ones (an adapter swapped into a slot) make the
  medians of three requests jump by chance; a run on two slots at 10 % of its probe's rate, 10 requests in its
  window, read 30 -> 220 ms without it. Below about six requests per third no order reaches p = 0.001, so there
  the rate rule and the latency bounds decide.

Latency figures of a point are pooled over its window's successful requests (TTFT and end-to-end latency one
value per request, inter-token latencies one per gap), percentiles by linear interpolation. Achieved throughput
and goodput count the successful requests that finished inside the window, per second of window. TPOT is
per request, its mean inter-token latency, and its percentiles are over the window's requests. A request meets the
SLO when its TTFT is within ``slo.ttft_p99_ms`` and its mean inter-token latency within ``slo.itl_p99_ms`` and
``slo.tpot_p99_ms``; goodput is those requests per second. A point meets the SLO when each p99 the SLO bounds
(TTFT, ITL, TPOT) is within its bound and it is not over-saturated (an over-saturated run's latencies leave out the
requests it never finished, so they read low).

Capacity at the SLO (``Capacity.of``), per cycle: the rates ascending, the first failing rate ends the search (a
rate meeting the SLO above a failing one is taken as noise); capacity is interpolated between the last meeting
rate and the first failing one, linearly in each p99 latency the failing rate misses (the lowest crossing
wins); where the first failing rate is over-saturated, capacity is the last meeting rate (no interpolation on
latencies that read low), and the cycle only says that capacity lies between the two rates: its ``upper_per_s``
is the failing rate (elsewhere the figure itself). Where the later cycles searched (``measure.sweep``), capacity is
theirs alone: cycle 0, on rates far apart, only found the range they bisect, and would otherwise bring its coarse
bracket into every interval. A cycle whose lowest rate fails, or whose every rate meets, gives a bound, not a
value, and says so (``bound``). The capacities of the cycles give the median and its
distribution-free 95 % interval (``median.MedianInterval``, as every interval of method v2): order statistics,
no assumption on the shape of the distribution; the interval's upper end is the same order statistic of the
cycles' ``upper_per_s``, so that rates too far apart to place capacity widen the interval instead of reading as
a tight one (six cycles that each met 10 % and over-saturated at 40 % give [10 %, 40 %], not [10 %, 10 %]).
Below six repeats no pair of order statistics covers 95 %, the interval is then the range and ``coverage`` says
what it covers. A bootstrap was not used: with a handful of repeats it returns the same order statistics and
claims more coverage than it has.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from ..loadgen.arrivals import OpenLoopRun, percentile
from ..loadgen.client import RequestRecord
from ..median import MedianInterval

RATE_POINT_SCHEMA = "lorabench.rate_point/1"
SWEEP_SCHEMA = "lorabench.rate_sweep/1"
CAPACITY_SCHEMA = "lorabench.capacity/1"
MIN_SHORTFALL = 3  # requests the rate rule needs missing before it calls a window over-saturated
QUANTILES = (50, 90, 99)

T = TypeVar("T")


def _check_schema(data: dict[str, Any], schema: str, what: str) -> None:
    if data.get("schema") != schema:
        raise ValueError(f"{what}: schema {data.get('schema')!r}, expected {schema!r}")


def _from_fields(cls: type[T], data: dict[str, Any]) -> T:
    """``cls`` from a JSON dict: its own fields only, a float field written as null read back as NaN."""
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            continue
        v = data[f.name]
        if v is None and str(f.type) == "float":
            v = float("nan")
        kw[f.name] = v
    return cls(**kw)


def _float(v: Any) -> float:
    return float("nan") if v is None else float(v)


def _ms(values: list[float]) -> list[float]:
    return [1000.0 * v for v in values if not math.isnan(v)]


# The SLO's terms: (name, the Slo field bounding it, the RatePoint field it bounds)
SLO_TERMS = (
    ("p99 TTFT", "ttft_p99_ms", "ttft_ms_p99"),
    ("p99 ITL", "itl_p99_ms", "itl_ms_p99"),
    ("p99 TPOT", "tpot_p99_ms", "tpot_ms_p99"),
)


@dataclass(frozen=True)
class Slo:
    """The latency target, in milliseconds: p99 TTFT, p99 inter-token latency over every gap of the window's
    requests (ITL), and p99 over the requests of each one's mean inter-token latency (TPOT, MLPerf's and vLLM's
    "time per output token"); a bound left out is not checked. ITL catches single stalls (one long gap in a
    hundred fails it), TPOT only streams slow on the whole."""

    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    tpot_p99_ms: float | None = None

    def __post_init__(self) -> None:
        if not self.bounds():
            raise ValueError("slo: give at least one of ttft_p99_ms, itl_p99_ms, tpot_p99_ms")

    def bounds(self) -> list[tuple[str, float, str]]:
        """The terms given: (name, bound in ms, the RatePoint field it bounds)."""
        return [(name, getattr(self, f), attr) for name, f, attr in SLO_TERMS if getattr(self, f) is not None]

    @property
    def text(self) -> str:
        """The bounds in words: "p99 TTFT <= 500 ms and p99 ITL <= 50 ms"."""
        return " and ".join(f"{name} <= {bound:g} ms" for name, bound, _ in self.bounds())

    def to_json(self) -> dict[str, Any]:
        d = {"ttft_p99_ms": self.ttft_p99_ms, "itl_p99_ms": self.itl_p99_ms}
        if self.tpot_p99_ms is not None:  # an SLO without it writes as before the term existed
            d["tpot_p99_ms"] = self.tpot_p99_ms
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Slo:
        return cls(data.get("ttft_p99_ms"), data.get("itl_p99_ms"), data.get("tpot_p99_ms"))

    def request_meets(self, rec: RequestRecord) -> bool:
        """A successful request whose TTFT and mean inter-token latency are within the bounds (the mean against
        the ITL bound and the TPOT bound alike: one request has no p99 of its own)."""
        if not rec.ok:
            return False
        if self.ttft_p99_ms is not None and not 1000 * rec.ttft_s <= self.ttft_p99_ms:
            return False
        for bound in (self.itl_p99_ms, self.tpot_p99_ms):
            if bound is not None and rec.itl_s and not 1000 * statistics.fmean(rec.itl_s) <= bound:
                return False
        return True

    def missed_bounds(self, point: RatePoint) -> list[tuple[str, float, str]]:
        """The terms (as ``bounds``) a point's p99 latencies miss (a latency not measured misses its bound)."""
        return [(name, bound, attr) for name, bound, attr in self.bounds() if not getattr(point, attr) <= bound]

    def missed(self, point: RatePoint) -> list[str]:
        """The bounds a point misses, in words ("p99 ITL 67.0 ms > 50 ms")."""
        return [
            f"{name} {getattr(point, attr):.1f} ms > {bound:g} ms" for name, bound, attr in self.missed_bounds(point)
        ]


@dataclass(frozen=True)
class OverSaturation:
    """When a rate is over-saturated (the module's docstring gives both rules)."""

    min_achieved_fraction: float
    ttft_growth_factor: float
    ttft_growth_min_ms: float
    ttft_growth_alpha: float = 1.0  # sweeps written before the test existed: no test

    def judge(
        self, offered: int, completed: int, ttft_first_ms: float, ttft_last_ms: float, growth_p: float = 0.0
    ) -> str:
        """Why a window is over-saturated ("" where it is not): ``offered`` arrivals a server keeping pace
        finishes in the window (the rate rule's), ``completed`` requests finished in it, median TTFT of its first
        and last third, and the one-sided p-value that the last third's TTFTs are larger (``later_larger_p``;
        0, the default, counts as beyond chance)."""
        reasons = []
        if offered and completed < self.min_achieved_fraction * offered and offered - completed >= MIN_SHORTFALL:
            reasons.append(
                f"{completed} requests completed in the window against {offered} arrivals due "
                f"({completed / offered:.1%} < {self.min_achieved_fraction:.0%})"
            )
        grew = ttft_last_ms - ttft_first_ms
        significant = growth_p <= self.ttft_growth_alpha
        if ttft_first_ms >= 0 and math.isfinite(ttft_first_ms) and grew >= self.ttft_growth_min_ms and significant:
            if math.isinf(ttft_last_ms):
                reasons.append("TTFT p50 grew without bound (the window's last third got no first token in the run)")
            elif ttft_last_ms > self.ttft_growth_factor * ttft_first_ms:
                reasons.append(
                    f"TTFT p50 grew {ttft_last_ms / max(ttft_first_ms, 1e-9):.1f}x through the window "
                    f"({ttft_first_ms:.0f} -> {ttft_last_ms:.0f} ms, p = {growth_p:.1g})"
                )
        return "; ".join(reasons)


def later_larger_p(first: list[float], last: list[float]) -> float:
    """One-sided p-value that the values of ``last`` are larger than those of ``first`` (Mann-Whitney U, normal
    approximation with continuity and tie corrections; infinite values rank above every finite one). NaN where
    either list is empty; 1 where every value ties."""
    n1, n2 = len(first), len(last)
    if not n1 or not n2:
        return float("nan")
    if any(math.isnan(v) for v in (*first, *last)):
        raise ValueError("later_larger_p: a NaN has no rank (a missing TTFT is infinite, see _thirds_ttft_ms)")
    pooled = sorted([(v, 0) for v in first] + [(v, 1) for v in last])
    n = n1 + n2
    rank_sum_last = 0.0
    ties = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        t = j - i + 1
        ties += t**3 - t
        mid_rank = (i + j) / 2 + 1
        rank_sum_last += mid_rank * sum(1 for k in range(i, j + 1) if pooled[k][1])
        i = j + 1
    u = rank_sum_last - n2 * (n2 + 1) / 2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(var)
    return 0.5 * math.erfc(z / math.sqrt(2))


def _thirds_ttft_ms(run: OpenLoopRun) -> tuple[list[float], list[float]]:
    """TTFTs (ms) of the first and of the last third of the requests started in the window, by start; a request
    cut at the run's end without a first token counts as infinite, one that failed otherwise not at all."""
    vals = []
    for s in sorted(run.started_in_window(), key=lambda s: s.record.start_s):
        if not (s.record.ok or s.cut_at_end):
            continue
        t = s.record.ttft_s
        vals.append(math.inf if math.isnan(t) else 1000 * t)
    k = len(vals) // 3
    return (vals[:k], vals[-k:]) if k else ([], [])


@dataclass
class RatePoint:
    """One run of a sweep: one mix at one rate in one cycle (or the saturation probe: shape concurrency)."""

    server: str
    mix: str
    cycle: int
    position: int  # place in the cycle
    shape: str  # poisson, or concurrency (the probe)
    fraction: float  # of the mix's probe rate (NaN for the probe)
    rate_per_s: float  # the offered rate the schedule was drawn at (NaN for the probe)
    concurrency: int
    duration_s: float  # the steady-state window
    offered_per_s: float  # arrivals due in the window, per second
    achieved_per_s: float  # successful requests finished in the window, per second
    output_tok_per_s: float
    goodput_per_s: float  # of achieved_per_s, those meeting the SLO per request (NaN without an SLO)
    n_sent: int
    n_window: int  # started after the ramp and finished before the drain, successful
    n_completed: int
    n_errors: int  # started in the window and failed (cut at the run's end not counted)
    n_cut: int  # cut at the run's end
    ttft_ms_p50: float
    ttft_ms_p90: float
    ttft_ms_p99: float
    itl_ms_p50: float
    itl_ms_p90: float
    itl_ms_p99: float
    e2e_ms_p50: float
    e2e_ms_p90: float
    e2e_ms_p99: float
    ttft_first_third_ms: float
    ttft_last_third_ms: float
    send_lag_ms_p50: float
    send_lag_ms_p99: float
    send_lag_ms_max: float
    peak_in_flight: int
    client_bound: str = ""  # why the client may have set the pace ("" where nothing says so)
    over_saturated: str = ""  # why the rate is over-saturated ("" where it is not)
    ttft_growth_p: float = float("nan")  # the TTFT rule's p-value (later_larger_p; NaN in sweeps before it)
    # what the server's host did over the run (ramp to drain), where the job could read it: ``front_end_cpu`` the
    # share of one CPU its HTTP front end used, ``gpu_busy_pct`` the GPU's busy share (empty in sweeps before it)
    host: dict[str, float] = field(default_factory=dict)
    # per request, its mean inter-token latency (TPOT); percentiles over the window's requests (NaN in sweeps before)
    tpot_ms_p50: float = float("nan")
    tpot_ms_p90: float = float("nan")
    tpot_ms_p99: float = float("nan")

    @classmethod
    def of_run(
        cls,
        run: OpenLoopRun,
        *,
        server: str,
        mix: str,
        cycle: int,
        position: int,
        fraction: float,
        slo: Slo | None,
        over: OverSaturation,
    ) -> RatePoint:
        d = run.phases.duration_s
        kept = [r for r in run.window() if r.ok]
        completed = run.completed_in_window()
        started = run.started_in_window()
        ttft, itl, tpot, e2e = (
            _ms([r.ttft_s for r in kept]),
            _ms([x for r in kept for x in r.itl_s]),
            _ms([statistics.fmean(r.itl_s) for r in kept if r.itl_s]),
            _ms([r.latency_s for r in kept]),
        )
        lags = _ms(run.send_lags_s())
        first_third, last_third = _thirds_ttft_ms(run)
        first, last = (statistics.median(v) if v else float("nan") for v in (first_third, last_third))
        growth_p = later_larger_p(first_third, last_third)
        poisson = run.shape == "poisson"
        offered = run.scheduled_in_window() if poisson else 0
        # arrivals a server keeping pace finishes in the window: those due in it, moved by the median latency
        due = offered
        if poisson and completed:
            due = run.scheduled_in_window(statistics.median(r.latency_s for r in completed))
        q: dict[str, Any] = {
            f"{name}_ms_p{p}": percentile(vals, p)
            for name, vals in (("ttft", ttft), ("itl", itl), ("tpot", tpot), ("e2e", e2e))
            for p in QUANTILES
        }
        return cls(
            server=server,
            mix=mix,
            cycle=cycle,
            position=position,
            shape=run.shape,
            fraction=fraction,
            rate_per_s=run.rate_per_s,
            concurrency=run.concurrency,
            duration_s=d,
            offered_per_s=offered / d if poisson else float("nan"),
            achieved_per_s=len(completed) / d,
            output_tok_per_s=sum(r.completion_tokens for r in completed) / d,
            goodput_per_s=sum(slo.request_meets(r) for r in completed) / d if slo else float("nan"),
            n_sent=len(run.sent),
            n_window=len(kept),
            n_completed=len(completed),
            n_errors=sum(1 for s in started if not s.record.ok and not s.cut_at_end),
            n_cut=sum(1 for s in run.sent if s.cut_at_end),
            ttft_first_third_ms=first,
            ttft_last_third_ms=last,
            send_lag_ms_p50=percentile(lags, 50),
            send_lag_ms_p99=percentile(lags, 99),
            send_lag_ms_max=max(lags, default=float("nan")),
            peak_in_flight=run.peak_in_flight,
            client_bound=run.client_bound,
            over_saturated=over.judge(due, len(completed), first, last, growth_p) if poisson else "",
            ttft_growth_p=growth_p,
            **q,
        )

    @property
    def measured(self) -> bool:
        """Whether the point says anything: a request in its window, or over-saturated. A window that drew no
        arrival (a low rate in a short window) is left out of the capacity search, not taken as a failure."""
        return self.n_window > 0 or bool(self.over_saturated)

    def missed(self, slo: Slo) -> list[str]:
        """Why this point fails the SLO (empty where it meets it)."""
        out = slo.missed(self)
        if self.over_saturated:
            out.append("over-saturated")
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if not d["host"]:  # a sweep without it reads and writes as before the field existed
            del d["host"]
        return {"schema": RATE_POINT_SCHEMA, **d}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RatePoint:
        _check_schema(data, RATE_POINT_SCHEMA, "rate point")
        return _from_fields(cls, data)


@dataclass
class SweepResult:
    """Every run of one mix on one server: its probe, its rates (fractions of the probe's rate, fixed by cycle 0),
    one point per rate and cycle, and, where the later cycles searched, the range they bisected (fractions: its
    bottom met the SLO in cycle 0, its top failed it)."""

    server: str
    mix: str
    max_rate_per_s: float  # the probe's achieved rate
    probe: RatePoint
    fractions: list[float]
    points: list[RatePoint] = field(default_factory=list)
    cycles: int = 0
    stop_reason: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    search_range: list[float] | None = None
    # probes whose window completed nothing (a server still warming up), run again (``_Sweep.probe``)
    discarded_probes: list[RatePoint] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [f * self.max_rate_per_s for f in self.fractions]

    def cycle_points(self, cycle: int) -> list[RatePoint]:
        """The points of one cycle, by rate ascending."""
        return sorted((p for p in self.points if p.cycle == cycle), key=lambda p: p.fraction)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SWEEP_SCHEMA,
            "server": self.server,
            "mix": self.mix,
            "max_rate_per_s": self.max_rate_per_s,
            "probe": self.probe.to_json(),
            "fractions": list(self.fractions),
            "points": [p.to_json() for p in self.points],
            "cycles": self.cycles,
            "stop_reason": self.stop_reason,
            "settings": self.settings,
            "search_range": list(self.search_range) if self.search_range else None,
            # only where there were any: a sweep without them reads as it did before the field existed
            **({"discarded_probes": [p.to_json() for p in self.discarded_probes]} if self.discarded_probes else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepResult:
        _check_schema(data, SWEEP_SCHEMA, "rate sweep")
        return cls(
            server=data["server"],
            mix=data["mix"],
            max_rate_per_s=float(data["max_rate_per_s"]),
            probe=RatePoint.from_json(data["probe"]),
            fractions=[float(f) for f in data["fractions"]],
            points=[RatePoint.from_json(p) for p in data["points"]],
            cycles=int(data["cycles"]),
            stop_reason=data.get("stop_reason", ""),
            settings=dict(data.get("settings") or {}),
            search_range=[float(f) for f in data["search_range"]] if data.get("search_range") else None,
            discarded_probes=[RatePoint.from_json(p) for p in data.get("discarded_probes") or []],
        )


@dataclass(frozen=True)
class CycleCapacity:
    """Capacity at the SLO from one cycle's points. ``bound``: "" a value; "below" the lowest rate already fails
    (capacity is below ``capacity_per_s``); "at_least" every rate meets (capacity is at least it); "none" no
    point measured anything (capacity NaN, left out of the interval). ``upper_per_s``: the highest the cycle's
    capacity may be where its figure is the last meeting rate before an over-saturated one (that rate); NaN
    elsewhere, where the figure is its own upper end (``upper``). ``limit``: what ended the cycle's capacity, the
    terms its first failing rate missed ("p99 TTFT", "p99 ITL", "over-saturation", joined by " and " where it
    missed more than one; the one interpolated in where two were), "" where every rate met or none measured."""

    cycle: int
    capacity_per_s: float
    bound: str
    last_meeting_per_s: float
    first_failing_per_s: float
    method: str
    upper_per_s: float = float("nan")
    limit: str = ""

    @property
    def upper(self) -> float:
        return self.capacity_per_s if math.isnan(self.upper_per_s) else self.upper_per_s


def limit_of(point: RatePoint, slo: Slo) -> str:
    """The terms a failing point missed, by name ("p99 ITL", "p99 TTFT and over-saturation"); "" where it met."""
    names = [name for name, _, _ in slo.missed_bounds(point)]
    return " and ".join(names + (["over-saturation"] if point.over_saturated else []))


def cycle_capacity(points: list[RatePoint], slo: Slo, cycle: int) -> CycleCapacity:
    """Capacity at ``slo`` from one cycle's points (the module's docstring says how)."""
    nan = float("nan")
    pts = sorted((p for p in points if p.measured), key=lambda p: p.rate_per_s)
    if not pts:
        return CycleCapacity(cycle, nan, "none", nan, nan, "no rate of the cycle measured a request")
    fail = next((i for i, p in enumerate(pts) if p.missed(slo)), None)
    if fail is None:
        top = pts[-1].rate_per_s
        return CycleCapacity(
            cycle, top, "at_least", top, nan, "every rate met the SLO: capacity is at least the highest"
        )
    if fail == 0:
        low = pts[0]
        why = "; ".join(low.missed(slo))
        return CycleCapacity(
            cycle, low.rate_per_s, "below", nan, low.rate_per_s, f"the lowest rate fails ({why})",
            limit=limit_of(low, slo),
        )  # fmt: skip
    m, f = pts[fail - 1], pts[fail]
    if f.over_saturated:
        return CycleCapacity(
            cycle, m.rate_per_s, "", m.rate_per_s, f.rate_per_s, "last meeting rate (the next is over-saturated)",
            upper_per_s=f.rate_per_s, limit="over-saturation",
        )  # fmt: skip
    crossings = []
    for name, bound, attr in slo.bounds():
        vm, vf = getattr(m, attr), getattr(f, attr)
        if not vf > bound or math.isnan(vm) or vm > bound:
            continue
        crossings.append((m.rate_per_s + (bound - vm) / (vf - vm) * (f.rate_per_s - m.rate_per_s), name))
    if not crossings:  # the failing rate measured no latency to interpolate
        return CycleCapacity(
            cycle, m.rate_per_s, "", m.rate_per_s, f.rate_per_s, "last meeting rate", limit=limit_of(f, slo)
        )
    cap, name = min(crossings)
    return CycleCapacity(
        cycle, cap, "", m.rate_per_s, f.rate_per_s, f"linear in {name} between the two rates", limit=name
    )


@dataclass
class Capacity:
    """The highest rate (requests/s) one mix gets on one server within the SLO: the median over the cycles and
    its 95 % interval (``MedianInterval``; ``coverage`` below 0.95 with fewer than six cycles)."""

    server: str
    mix: str
    slo: Slo
    n: int
    capacity_per_s: float
    lo: float
    hi: float
    coverage: float
    max_rate_per_s: float  # the saturation probe's rate, for scale
    censored: int  # cycles that gave a bound, not a value
    client_bound_points: int
    unmeasured_points: int  # points whose window held no request (left out of the search)
    per_cycle: list[CycleCapacity] = field(default_factory=list)

    @classmethod
    def of(cls, sweep: SweepResult, slo: Slo) -> Capacity:
        cycles = sorted({p.cycle for p in sweep.points})
        per = [cycle_capacity(sweep.cycle_points(c), slo, c) for c in cycles]
        if sweep.search_range:  # cycle 0 only found the range; capacity is the search cycles'
            per = [c for c in per if c.cycle > 0]
        iv = MedianInterval.of([c.capacity_per_s for c in per])
        # a cycle's upper end is at least its figure: that order statistic of the upper ends is the interval's top
        upper = MedianInterval.of([c.upper for c in per if not math.isnan(c.capacity_per_s)])
        return cls(
            server=sweep.server,
            mix=sweep.mix,
            slo=slo,
            n=iv.n,
            capacity_per_s=iv.median,
            lo=iv.lo,
            hi=upper.hi,
            coverage=iv.coverage,
            max_rate_per_s=sweep.max_rate_per_s,
            censored=sum(1 for c in per if c.bound in ("below", "at_least")),
            client_bound_points=sum(1 for p in sweep.points if p.client_bound),
            unmeasured_points=sum(1 for p in sweep.points if not p.measured),
            per_cycle=per,
        )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["slo"] = self.slo.to_json()
        return {"schema": CAPACITY_SCHEMA, **d}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Capacity:
        _check_schema(data, CAPACITY_SCHEMA, "capacity")
        return cls(
            server=data["server"],
            mix=data["mix"],
            slo=Slo.from_json(data["slo"]),
            n=int(data["n"]),
            capacity_per_s=_float(data["capacity_per_s"]),
            lo=_float(data["lo"]),
            hi=_float(data["hi"]),
            coverage=_float(data["coverage"]),
            max_rate_per_s=_float(data["max_rate_per_s"]),
            censored=int(data["censored"]),
            client_bound_points=int(data["client_bound_points"]),
            unmeasured_points=int(data["unmeasured_points"]),
            per_cycle=[_from_fields(CycleCapacity, c) for c in data.get("per_cycle", [])],
        )
