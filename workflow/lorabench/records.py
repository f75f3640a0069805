"""Typed records of the analysis: the statistics of one cell (``CellSummary``, the measured part of a summary.json
row) and comparisons between cells, as the summary writes them (summary.json ``comparisons``, ``engine_comparison``,
``burst_scaling``) and the report and claims read them. A server job's facts are ``facts.ServerFacts``.

Each record has one serializer (``to_json``, the field names summary.json has always had) and one reader
(``from_json``); ``RatioSpan`` is the one ratio-with-interval type they share: num / den - 1 in percent, with the
ends of its 95 % interval (paired per cycle where the cells were measured in cycles, else the span the two medians'
intervals allow; ``stats.ratio_span``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .stats import Summary

SUMMARY_SCHEMA = "lorabench.summary/2"  # summary.json: rows, comparisons, engine_comparison, burst_scaling, ...


def _num(v: Any) -> float:
    return float("nan") if v is None else float(v)


def _json_num(v: float) -> float | None:
    return None if math.isnan(v) else v


@dataclass(frozen=True)
class RatioSpan:
    """num / den - 1, in percent, with its 95 % interval."""

    pct: float
    lo_pct: float
    hi_pct: float

    @classmethod
    def of(cls, span: tuple[float, float, float] | None) -> RatioSpan | None:
        return None if span is None else cls(*(float(x) for x in span))

    @property
    def halfwidth_points(self) -> float:
        """The larger distance from the figure to an end of its interval, in percentage points (nan if open)."""
        if math.isnan(self.lo_pct) or math.isnan(self.hi_pct):
            return float("nan")
        return max(self.pct - self.lo_pct, self.hi_pct - self.pct)

    def spans_zero(self) -> bool:
        return self.lo_pct <= 0 <= self.hi_pct

    def to_json(self) -> dict[str, float | None]:
        return {"ratio_pct": _json_num(self.pct), "ratio_lo_pct": _json_num(self.lo_pct),
                "ratio_hi_pct": _json_num(self.hi_pct)}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RatioSpan:
        return cls(_num(d.get("ratio_pct")), _num(d.get("ratio_lo_pct")), _num(d.get("ratio_hi_pct")))


# How far from 0 a co-resident A/A pair's interval may reach (points) and still say that co-residence distorts
# nothing measurable: two identical servers of one group, measured as any other pair, must agree within a point
# before the group's other cross-server pairs are read as the configurations' difference.
AA_POINTS = 1.0


def aa_reading(ratio: RatioSpan, points: float) -> str | None:
    """An A/A comparison's reading (two cells that differ in nothing but their place: the same mix on one server,
    or two servers of one setup): "holds" where its interval includes 0 and lies within ±``points`` of it; "too
    wide to confirm" where it includes 0 but reaches further (too few or too noisy cycles to tell); "distorts" where
    it leaves 0 out (something of the design, not the setup, moves the figure). None without an interval."""
    lo, hi = ratio.lo_pct, ratio.hi_pct
    if math.isnan(lo) or math.isnan(hi):
        return None
    if not lo <= 0 <= hi:
        return "distorts"
    return "holds" if -points <= lo and hi <= points else "too wide to confirm"


@dataclass(frozen=True)
class Comparison:
    """A condition against its server's reference condition at one burst size, within one server job: paired per
    cycle (method v2), by time (older studies) or unpaired; whether its half-width met the job's target."""

    server: str
    engine: str | None
    burst: int
    condition: str
    reference: str
    workload: str | None
    ratio: RatioSpan
    pairs: int
    paired_by: str  # cycle | time | unpaired
    target_points: float | None
    bound: str  # front-end-bound / host-bound mark of either cell, "" if none
    gpu_paced_r: float | None = None  # the larger of its two cells' (CellLoad.gpu_paced_r), None if neither
    aa: bool = False  # the condition sends what the reference sends (the same mix again: an A/A check)

    @property
    def within_target(self) -> bool | None:
        half = self.ratio.halfwidth_points
        return None if self.target_points is None or math.isnan(half) else bool(half <= self.target_points)

    @property
    def aa_reading(self) -> str | None:
        """An A/A row's reading (``aa_reading``) against the job's target (AA_POINTS without one); None for any
        other row or an unpaired one."""
        if not self.aa or self.paired_by == "unpaired":
            return None
        return aa_reading(self.ratio, self.target_points if self.target_points is not None else AA_POINTS)

    def to_json(self) -> dict[str, Any]:
        out = {"server": self.server, "engine": self.engine, "burst": self.burst, "condition": self.condition,
               "reference": self.reference, "workload": self.workload, **self.ratio.to_json(),
               "halfwidth_points": _json_num(self.ratio.halfwidth_points), "pairs": self.pairs,
               "paired_by": self.paired_by, "target_points": self.target_points,
               "within_target": self.within_target, "bound": self.bound,
               "gpu_paced_r": self.gpu_paced_r}  # fmt: skip
        # only on A/A rows (summaries before it: absent, and read back unchanged)
        return out | ({"aa": True, "aa_reading": self.aa_reading} if self.aa else {})

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Comparison:
        return cls(d["server"], d.get("engine"), int(d["burst"]), d["condition"], d["reference"], d.get("workload"),
                   RatioSpan.from_json(d), int(d.get("pairs") or 0), d.get("paired_by") or "unpaired",
                   d.get("target_points"), d.get("bound") or "", d.get("gpu_paced_r"), bool(d.get("aa")))  # fmt: skip


@dataclass(frozen=True)
class ServerComparison:
    """A cell of one server against the same condition and burst size on another server: paired per cycle where
    both are members of one co-resident group (``paired_by`` "cycle (group)"), else unpaired (the span the two
    medians' intervals allow)."""

    group: str | None
    burst: int
    condition: str
    server: str
    reference_server: str
    ratio: RatioSpan
    pairs: int
    paired_by: str  # "cycle (group)" | "unpaired"
    aa: bool = False  # the two servers are the same setup (an A/A pair: any difference is the harness's or the host's)

    @property
    def aa_reading(self) -> str | None:
        """An A/A row's reading (``aa_reading``, against AA_POINTS): whether co-resident servers measure alike on
        this machine; None for any other row or a row without pairs."""
        if not self.aa or self.paired_by == "unpaired":
            return None
        return aa_reading(self.ratio, AA_POINTS)

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "burst": self.burst, "condition": self.condition, "server": self.server,
                "reference_server": self.reference_server, **self.ratio.to_json(),
                "halfwidth_points": _json_num(self.ratio.halfwidth_points), "pairs": self.pairs,
                "paired_by": self.paired_by, "aa": self.aa, "aa_reading": self.aa_reading}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ServerComparison:
        return cls(d.get("group"), int(d["burst"]), d["condition"], d["server"], d["reference_server"],
                   RatioSpan.from_json(d), int(d.get("pairs") or 0), d.get("paired_by") or "unpaired",
                   bool(d.get("aa")))  # fmt: skip


@dataclass(frozen=True)
class EngineSide:
    """One engine's cell in an engine comparison."""

    engine: str
    server: str
    tok_s: float
    spread_pct: float | None
    ci_pct: float | None = None  # the 95 % interval of the median, ± percent (summaries before it: absent)


@dataclass(frozen=True)
class EngineComparison:
    """The same LoRA setting, condition and burst on two engines (b over a): paired per cycle where both servers are
    members of one co-resident group (``paired_by`` "cycle (group)"), else unpaired, the interval then the span the
    two medians' intervals allow."""

    lora: bool
    slots: int | None
    condition: str
    burst: int
    a: EngineSide
    b: EngineSide
    ratio: RatioSpan
    max_lora_rank: int | None = None  # both servers' (summaries before it: absent)
    paired_by: str = "unpaired"  # "cycle (group)": both servers in one co-resident group

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"lora": self.lora, "slots": self.slots, "condition": self.condition,
                               "burst": self.burst}  # fmt: skip
        if self.paired_by != "unpaired":  # (summaries before it: absent, read as unpaired)
            out["paired_by"] = self.paired_by
        if self.max_lora_rank is not None:
            out["max_lora_rank"] = self.max_lora_rank
        for tag, side in (("a", self.a), ("b", self.b)):
            out |= {f"{tag}_engine": side.engine, f"{tag}_server": side.server, f"{tag}_tok_s": side.tok_s,
                    f"{tag}_spread_pct": side.spread_pct}  # fmt: skip
            if side.ci_pct is not None:
                out[f"{tag}_ci_pct"] = side.ci_pct
        return out | self.ratio.to_json()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EngineComparison:
        sides = [EngineSide(d[f"{t}_engine"], d[f"{t}_server"], d[f"{t}_tok_s"], d.get(f"{t}_spread_pct"),
                            d.get(f"{t}_ci_pct")) for t in ("a", "b")]  # fmt: skip
        return cls(bool(d["lora"]), d.get("slots"), d["condition"], int(d["burst"]), sides[0], sides[1],
                   RatioSpan.from_json(d), d.get("max_lora_rank"), d.get("paired_by") or "unpaired")  # fmt: skip


@dataclass(frozen=True)
class BurstScaling:
    """Within one server job and condition: the largest burst's throughput over the smallest's, paired per cycle."""

    server: str
    condition: str
    burst: int
    reference_burst: int
    ratio: RatioSpan
    pairs: int

    def to_json(self) -> dict[str, Any]:
        return {"server": self.server, "condition": self.condition, "burst": self.burst,
                "reference_burst": self.reference_burst, **self.ratio.to_json(), "pairs": self.pairs}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BurstScaling:
        return cls(d["server"], d["condition"], int(d["burst"]), int(d["reference_burst"]), RatioSpan.from_json(d),
                   int(d.get("pairs") or 0))  # fmt: skip


LATENCY_TAILS = tuple(f"{n}_p{q}_ms" for n in ("ttft", "itl", "latency") for q in (50, 90, 99))
# The host's and the GPU's telemetry a cell's throughput is set against (HostTelemetry, GpuTelemetry), in row order.
TELEMETRY = (
    "gpu_util_pct",
    "host_steal_pct",
    "engine_cpus",
    "engine_top_thread_pct",
    "engine_top_thread_preempted_per_s",
    "engine_top_thread_waits_per_s",
    "engine_top_thread_migrations_per_s",
    "engine_top_cpu_steal_pct",
    "client_cpu_pct",
    "host_cpu_probe_ms",
)


@dataclass(frozen=True)
class CellThroughput:
    """A cell's throughput: its distribution over cycles, the 95 % interval of its median and whether that met the
    job's target, the streamed bursts' median beside the non-streamed ones', and the total (prompt + output)."""

    summary: Summary
    source: str  # non-streamed bursts | streamed bursts
    ci_lo: float
    ci_hi: float
    ci_pct: float
    ci_coverage: float
    streamed_median: float | None
    target_ci_pct: float | None
    reached_target: bool | None
    total_median: float
    total_spread_pct: float

    def to_json(self) -> dict[str, Any]:
        return {**self.summary.as_dict("throughput"), "throughput_from": self.source, "throughput_ci_lo": self.ci_lo,
                "throughput_ci_hi": self.ci_hi, "throughput_ci_pct": self.ci_pct,
                "throughput_ci_coverage": self.ci_coverage, "throughput_streamed_median": self.streamed_median,
                "target_ci_pct": self.target_ci_pct, "reached_target": self.reached_target,
                "throughput_total_median": self.total_median,
                "throughput_total_spread_pct": self.total_spread_pct}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CellThroughput:
        summary = Summary(**{k: d[f"throughput_{k}"] for k in Summary.__dataclass_fields__})
        return cls(summary, d["throughput_from"], d["throughput_ci_lo"], d["throughput_ci_hi"], d["throughput_ci_pct"],
                   d["throughput_ci_coverage"], d.get("throughput_streamed_median"), d.get("target_ci_pct"),
                   d.get("reached_target"), d["throughput_total_median"],
                   d["throughput_total_spread_pct"])  # fmt: skip


@dataclass(frozen=True)
class CellLoad:
    """What kept the engine busy during a cell: its front end's CPU and the GPU's busy share (non-streamed and
    streamed bursts), and what the throughput and latency figures measured where not the engine (``boundness``)."""

    front_end_cpu: float | None
    front_end_cpu_streamed: float | None
    gpu_busy_pct: float | None
    gpu_busy_pct_streamed: float | None
    throughput_bound: str
    latency_bound: str
    # r between its bursts' throughput and the GPU's busy share, where positive beyond chance (stats.paced_by): its
    # slow bursts are those in which the GPU waited for the host
    gpu_paced_r: float | None = None
    # r between the throughput bursts' figures and the front end's CPU in each (None with fewer than three, or a CPU
    # share that never moves): a front end that worked harder in the slow bursts (summary.spread_reason names it)
    front_end_cpu_corr: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"front_end_cpu_median": self.front_end_cpu,
                "front_end_cpu_streamed_median": self.front_end_cpu_streamed, "gpu_busy_pct_median": self.gpu_busy_pct,
                "gpu_busy_pct_streamed_median": self.gpu_busy_pct_streamed, "throughput_bound": self.throughput_bound,
                "latency_bound": self.latency_bound, "throughput_gpu_paced_r": self.gpu_paced_r,
                "front_end_cpu_throughput_corr": self.front_end_cpu_corr}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CellLoad:
        return cls(d.get("front_end_cpu_median"), d.get("front_end_cpu_streamed_median"), d.get("gpu_busy_pct_median"),
                   d.get("gpu_busy_pct_streamed_median"), d.get("throughput_bound") or "",
                   d.get("latency_bound") or "", d.get("throughput_gpu_paced_r"),
                   d.get("front_end_cpu_throughput_corr"))  # fmt: skip


@dataclass(frozen=True)
class CellLatency:
    """A cell's latencies from its streamed bursts: medians over bursts of each burst's median, and of each burst's
    percentiles (``tails``, keyed as LATENCY_TAILS: per request; ITL per token)."""

    ttft_median_ms: float
    itl_median_ms: float
    latency_median_ms: float
    itl_spread_pct: float
    tails: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"ttft_median_ms": self.ttft_median_ms, "itl_median_ms": self.itl_median_ms,
                "latency_median_ms": self.latency_median_ms, "itl_spread_pct": self.itl_spread_pct,
                **{k: self.tails[k] for k in LATENCY_TAILS}}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CellLatency:
        return cls(_num(d.get("ttft_median_ms")), _num(d.get("itl_median_ms")), _num(d.get("latency_median_ms")),
                   _num(d.get("itl_spread_pct")), {k: _num(d.get(k)) for k in LATENCY_TAILS})  # fmt: skip


@dataclass(frozen=True)
class GpuState:
    """The GPU's state during a cell's measurements (GpuTelemetry): where throughput moves between measurements,
    does the SM clock or the power move with it?"""

    sm_mhz_median: float
    sm_mhz_spread_pct: float
    power_w_median: float
    sm_mhz_throughput_corr: float | None

    def to_json(self) -> dict[str, Any]:
        return {"gpu_sm_mhz_median": self.sm_mhz_median, "gpu_sm_mhz_spread_pct": self.sm_mhz_spread_pct,
                "gpu_power_w_median": self.power_w_median,
                "gpu_sm_mhz_throughput_corr": self.sm_mhz_throughput_corr}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GpuState | None:
        if d.get("gpu_sm_mhz_median") is None:
            return None
        return cls(d["gpu_sm_mhz_median"], d["gpu_sm_mhz_spread_pct"], d["gpu_power_w_median"],
                   d.get("gpu_sm_mhz_throughput_corr"))  # fmt: skip


@dataclass(frozen=True)
class Telemetry:
    """One telemetry series over a cell's measurements (one of TELEMETRY): its median and its correlation with
    throughput (None with fewer than three values or values that never move)."""

    name: str
    median: float
    throughput_corr: float | None

    def to_json(self) -> dict[str, Any]:
        return {f"{self.name}_median": self.median, f"{self.name}_throughput_corr": self.throughput_corr}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> tuple[Telemetry, ...]:
        return tuple(cls(n, d[f"{n}_median"], d.get(f"{n}_throughput_corr")) for n in TELEMETRY
                     if d.get(f"{n}_median") is not None)  # fmt: skip


@dataclass(frozen=True)
class Spread:
    """Where a cell's spread comes from (summary.spread_sources) and, for a cell whose interval missed its target,
    why (summary.spread_reason: the kind, the sentence, the telemetry that moves with throughput)."""

    between_sd_pct: float | None
    burst_sd_pct: float | None
    kind: str | None = None
    reason: str | None = None
    moves_with: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"between_sd_pct": self.between_sd_pct, "burst_sd_pct": self.burst_sd_pct, "spread_kind": self.kind,
                "spread_reason": self.reason, "spread_moves_with": self.moves_with}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Spread:
        return cls(d.get("between_sd_pct"), d.get("burst_sd_pct"), d.get("spread_kind"), d.get("spread_reason"),
                   d.get("spread_moves_with"))  # fmt: skip


@dataclass(frozen=True)
class CellSummary:
    """The statistics of one server x condition x burst from its measured rows (summary.summarize_cell): the
    measured columns of its summary.json / summary.csv row. Queue depths, the GPU's state, each telemetry series and
    the engine's busiest thread are columns only where the cell recorded them."""

    throughput: CellThroughput
    bursts_measured: int
    outlier_bursts: int
    measured_s: float
    cycles: int | None
    load: CellLoad
    latency: CellLatency
    measurements: int
    measurements_with_errors: int
    request_errors: int
    requests: int
    first_rep_throughput: float
    first_rep_deviation_pct: float
    first_rep_stands_out: bool
    values: list[float]
    throughput_by_time: str
    throughput_by_cycle: str | None
    ttft_by_cycle: str | None
    itl_by_cycle: str | None
    prompt_tokens_per_request: float | None
    queue_medians: dict[str, float]  # running_max, waiting_max, deferred_max: those recorded
    gpu: GpuState | None
    telemetry: tuple[Telemetry, ...]
    engine_top_thread_pct_min: float | None
    engine_top_thread: str | None
    spread: Spread

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.throughput.to_json(), "bursts_measured": self.bursts_measured,
                               "outlier_bursts": self.outlier_bursts, "measured_s": self.measured_s,
                               "cycles": self.cycles, **self.load.to_json(), **self.latency.to_json(),
                               "measurements": self.measurements,
                               "measurements_with_errors": self.measurements_with_errors,
                               "request_errors": self.request_errors, "requests": self.requests,
                               "first_rep_throughput": self.first_rep_throughput,
                               "first_rep_deviation_pct": self.first_rep_deviation_pct,
                               "first_rep_stands_out": self.first_rep_stands_out, "values": self.values,
                               "throughput_by_time": self.throughput_by_time,
                               "throughput_by_cycle": self.throughput_by_cycle, "ttft_by_cycle": self.ttft_by_cycle,
                               "itl_by_cycle": self.itl_by_cycle,
                               "prompt_tokens_per_request": self.prompt_tokens_per_request}  # fmt: skip
        out |= {f"{q}_median": v for q, v in self.queue_medians.items()}
        if self.gpu is not None:
            out |= self.gpu.to_json()
        for t in self.telemetry:
            out |= t.to_json()
        if self.engine_top_thread_pct_min is not None:
            out["engine_top_thread_pct_min"] = self.engine_top_thread_pct_min
        if self.engine_top_thread is not None:
            out["engine_top_thread"] = self.engine_top_thread
        return out | self.spread.to_json()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CellSummary:
        depths = ("running_max", "waiting_max", "deferred_max")
        queues = {q: d[f"{q}_median"] for q in depths if d.get(f"{q}_median") is not None}
        return cls(CellThroughput.from_json(d), int(d["bursts_measured"]), int(d["outlier_bursts"]),
                   float(d["measured_s"]), d.get("cycles"), CellLoad.from_json(d), CellLatency.from_json(d),
                   int(d["measurements"]), int(d["measurements_with_errors"]), int(d["request_errors"]),
                   int(d["requests"]), _num(d.get("first_rep_throughput")), _num(d.get("first_rep_deviation_pct")),
                   bool(d.get("first_rep_stands_out")), list(d.get("values") or []), d.get("throughput_by_time") or "",
                   d.get("throughput_by_cycle"), d.get("ttft_by_cycle"), d.get("itl_by_cycle"),
                   d.get("prompt_tokens_per_request"), queues, GpuState.from_json(d), Telemetry.from_json(d),
                   d.get("engine_top_thread_pct_min"), d.get("engine_top_thread"), Spread.from_json(d))  # fmt: skip
