"""Queues and batch sizes per condition, from the engine metrics each server job sampled (metrics.jsonl).

Why does throughput fall when a burst uses more distinct adapters than a server has slots? The engine's own
gauges say what its scheduler did: how many requests ran together (``running``: the batch), how many waited
(``waiting``) and, where the engine reports it, how many waited for an adapter slot (``deferred``). This module
turns the sampled gauges into time series per measurement and figures per server, condition and burst:

- ``batch``: the mean of ``running`` over the samples taken while requests were in flight, per measurement;
  the cell's figure is the median of those means with its 95 % interval (:class:`~lorabench.stats.MedianInterval`);
- ``waiting`` and ``deferred``: their means over the same samples, and the share of in-flight samples in which
  any request was deferred.

Samples only exist while requests are in flight where the harness scraped during bursts (``harness.metrics:
during``); otherwise only the warm-up bursts were sampled in flight, and the figures say they come from those.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .engines import get_engine
from .facts import ServerFacts
from .io import read_json, read_jsonl, write_json
from .stats import MedianInterval

SERIES = ("running", "waiting", "deferred")
MAX_TRACES = 4  # per cell, for the plot: the first measurements in time


def parse_measurement_id(mid: str) -> tuple[str, int, bool]:
    """(condition, burst, warm-up) of a measurement id: ``cond/burst/rep`` or ``warmup/cond/burst/w[/startN]``."""
    parts = mid.split("/")
    if parts[0] == "warmup":
        return parts[1], int(parts[2]), True
    return parts[0], int(parts[1]), False


def series_by_measurement(rows: list[dict[str, Any]], metric_names: dict[str, str]) -> dict[str, list[dict]]:
    """Per measurement id, one point per sampling time with running/waiting/deferred (label variants summed, a
    ``reason`` label folded into the name, names mapped to the engine's neutral ones). Series an engine does
    not report stay absent from its points."""
    acc: dict[str, dict[float, dict[str, float]]] = {}
    for r in rows:
        name = r["name"]
        if "reason" in r.get("labels", {}):
            name = f"{name}_{r['labels']['reason']}"
        short = metric_names.get(name)
        if short not in SERIES:
            continue
        point = acc.setdefault(r["measurement_id"], {}).setdefault(float(r["t"]), {})
        point[short] = point.get(short, 0.0) + float(r["value"])
    return {mid: [{"t": t, **p} for t, p in sorted(pts.items())] for mid, pts in acc.items()}


@dataclass(frozen=True)
class InFlight:
    """Figures of one server x condition x burst from its measurements' in-flight samples: the batch (median over
    measurements of their mean ``running``, with its 95 % interval), waiting and deferred requests."""

    measurements: int
    measurements_in_flight: int
    busy_samples: int
    batch_median: float | None
    batch_lo: float | None
    batch_hi: float | None
    batch_coverage: float | None
    batch_max: float | None
    waiting_mean: float | None
    waiting_max: float | None
    deferred_mean: float | None
    deferred_max: float | None
    deferred_share_pct: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> InFlight:
        keys = cls.__dataclass_fields__
        return cls(int(d["measurements"]), int(d["measurements_in_flight"]), int(d["busy_samples"]),
                   *(d.get(k) for k in list(keys)[3:]))  # fmt: skip


@dataclass(frozen=True)
class TtftTail:
    """The TTFT of a cell's measured requests that succeeded: median, p90 and p99 over all of them, and the 95 %
    interval of that pooled p90 (``pooled_interval``: whole measurements resampled)."""

    requests: int
    p50_ms: float | None
    p90_ms: float | None
    p99_ms: float | None
    p90_lo_ms: float | None
    p90_hi_ms: float | None

    def to_json(self) -> dict[str, Any]:
        return {f"ttft_{k}": v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TtftTail | None:
        if "ttft_requests" not in d:
            return None
        return cls(int(d["ttft_requests"]), *(d.get(f"ttft_{k}") for k in list(cls.__dataclass_fields__)[1:]))


@dataclass(frozen=True)
class QueueCell:
    """One server x condition x burst of queues.json: its in-flight figures (from the measurements, or from the
    warm-up bursts where no measurement was sampled in flight: ``source``), the TTFT tail of its requests where
    they were recorded, the running adapter sets the engine listed, and up to MAX_TRACES series for the plot."""

    condition: str
    burst: int
    distinct_adapters: int
    source: str  # measurements | warm-up bursts
    in_flight: InFlight
    assignment: str
    ttft: TtftTail | None
    running_sets_seen: int | None
    adapters_seen_running: int | None
    traces: list[list[list[float]]]

    def to_json(self) -> dict[str, Any]:
        return {"condition": self.condition, "burst": self.burst, "distinct_adapters": self.distinct_adapters,
                "source": self.source, **self.in_flight.to_json(), "assignment": self.assignment,
                **(self.ttft.to_json() if self.ttft else {}), "running_sets_seen": self.running_sets_seen,
                "adapters_seen_running": self.adapters_seen_running, "traces": self.traces}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> QueueCell:
        return cls(d["condition"], int(d["burst"]), int(d["distinct_adapters"]), d["source"], InFlight.from_json(d),
                   d.get("assignment") or "cycle", TtftTail.from_json(d), d.get("running_sets_seen"),
                   d.get("adapters_seen_running"), d.get("traces") or [])  # fmt: skip


def busy(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples taken while requests were in flight (running or waiting)."""
    return [p for p in points if p.get("running", 0) + p.get("waiting", 0) > 0]


def _in_flight(measured: dict[str, list[dict]], has_deferred: bool) -> InFlight:
    """Figures of one server x condition x burst from its measurements' in-flight samples."""
    per_batch, per_wait, per_def, all_busy = [], [], [], []
    for pts in measured.values():
        b = busy(pts)
        if not b:
            continue
        all_busy += b
        per_batch.append(statistics.fmean(p.get("running", 0.0) for p in b))
        per_wait.append(statistics.fmean(p.get("waiting", 0.0) for p in b))
        if has_deferred:
            per_def.append(statistics.fmean(p.get("deferred", 0.0) for p in b))
    iv = MedianInterval.of(per_batch)
    return InFlight(
        measurements=len(measured),
        measurements_in_flight=len(per_batch),
        busy_samples=len(all_busy),
        batch_median=iv.median if iv.n else None,
        batch_lo=iv.lo if iv.n else None,
        batch_hi=iv.hi if iv.n else None,
        batch_coverage=iv.coverage if iv.n else None,
        batch_max=max((p.get("running", 0.0) for p in all_busy), default=None),
        waiting_mean=statistics.fmean(per_wait) if per_wait else None,
        waiting_max=max((p.get("waiting", 0.0) for p in all_busy), default=None),
        deferred_mean=statistics.fmean(per_def) if per_def else None,
        deferred_max=max((p.get("deferred", 0.0) for p in all_busy), default=None) if has_deferred else None,
        deferred_share_pct=(
            100.0 * sum(1 for p in all_busy if p.get("deferred", 0) > 0) / len(all_busy)
            if has_deferred and all_busy
            else None
        ),
    )


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between order statistics; None without values."""
    vals = sorted(values)
    if not vals:
        return None
    pos = (len(vals) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


TAIL_RESAMPLES = 1000  # bootstrap resamples of a cell's measurements for the interval of its pooled p90


def pooled_interval(groups: list[list[float]], q: float, resamples: int = TAIL_RESAMPLES) -> tuple[float, float] | None:
    """95 % interval of the ``q``-th percentile of the pooled values, by resampling whole groups with replacement
    (a cluster bootstrap, seeded: the same values always give the same interval). A group is one measurement's
    requests: they share its burst and its queue, so the measurement, not the request, is the independent unit.
    Unlike the per-measurement percentiles, whose median with 8 requests a burst interpolates between a burst's two
    slowest requests, the interval is of the pooled figure it stands beside. None with fewer than two groups."""
    groups = [g for g in groups if g]
    if len(groups) < 2:
        return None
    rng = random.Random(0)
    k = len(groups)
    stats = sorted(
        p
        for _ in range(resamples)
        if (p := percentile([v for _ in range(k) for v in groups[rng.randrange(k)]], q)) is not None
    )
    return stats[int(0.025 * len(stats))], stats[math.ceil(0.975 * len(stats)) - 1]


def ttft_tails(records: list[dict[str, Any]]) -> dict[tuple[str, int], TtftTail]:
    """Per condition and burst, the TTFT of the measured (not warm-up) requests that succeeded: median, p90 and
    p99 over all of them, and the 95 % interval of that p90 (``pooled_interval``, resampling measurements)."""
    by_cell: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in records:
        ttft = r.get("ttft_s")
        if r.get("warmup") or r.get("error") or ttft is None or not math.isfinite(float(ttft)):
            continue  # a non-streamed request (method v2's throughput bursts) has no TTFT
        by_cell.setdefault((r["condition"], int(r["burst"])), {}).setdefault(r["measurement_id"], []).append(
            1000.0 * float(r["ttft_s"])
        )
    out = {}
    for key, per in by_cell.items():
        pooled = [v for vals in per.values() for v in vals]
        iv = pooled_interval([per[m] for m in sorted(per)], 90)
        out[key] = TtftTail(
            requests=len(pooled),
            p50_ms=percentile(pooled, 50),
            p90_ms=percentile(pooled, 90),
            p99_ms=percentile(pooled, 99),
            p90_lo_ms=iv[0] if iv else None,
            p90_hi_ms=iv[1] if iv else None,
        )
    return out


def adapter_sets(rows: list[dict[str, Any]], engine: Any, starts: dict[str, float]) -> dict[str, dict[str, set[str]]]:
    """Per measurement id, the adapter sets the engine listed as running, and every adapter among them: how many
    sets the batch went through traces adapters swapped in and out. vLLM's lora_requests_info keeps one series per
    set ever seen, valued with the time it was last current; only those current after the measurement's first
    request (``starts``: epoch seconds per measurement id) count. Without a start, nothing counts."""
    out: dict[str, dict[str, set[str]]] = {}
    for r in rows:
        sets = engine.lora_sets(r)
        start = starts.get(r["measurement_id"])
        if sets is None or not sets[0] or start is None or float(r["value"]) < start:
            continue
        cell = out.setdefault(r["measurement_id"], {"sets": set(), "adapters": set()})
        cell["sets"].add(sets[0])
        cell["adapters"].update(a for a in sets[0].split(",") if a)
    return out


def _traces(measured: dict[str, list[dict]]) -> list[list[list[float]]]:
    """Up to MAX_TRACES measurements' series as [seconds since the measurement's first sample, running,
    waiting, deferred] rows, for the plot."""
    out = []
    for pts in sorted(measured.values(), key=lambda p: p[0]["t"])[:MAX_TRACES]:
        t0 = pts[0]["t"]
        out.append(
            [[round(p["t"] - t0, 4), p.get("running", 0.0), p.get("waiting", 0.0), p.get("deferred", 0.0)] for p in pts]
        )
    return out


def server_queues(
    rows: list[dict[str, Any]],
    facts: ServerFacts,
    conditions: dict[str, Any],
    records: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One server's queue figures per condition and burst (from its metrics.jsonl rows and facts.json), with the
    TTFT tail of its measured requests (records.jsonl) and the running adapter sets the engine listed: the server's
    head with its ``cells`` (QueueCell)."""
    cfg = facts.config
    cells: list[QueueCell] = []
    head: dict[str, Any] = {
        "server": facts.server,
        "engine": facts.engine,
        "status": facts.status,
        "lora": cfg.get("lora"),
        "max_loras": cfg.get("max_loras"),
        "metrics": (facts.harness or {}).get("metrics"),  # when the harness scraped: during, between, off
        "cells": cells,
    }
    if not facts.ok:
        return head
    engine = get_engine(facts.engine)
    names = engine.metric_names
    has_deferred = "deferred" in names.values()
    head["reports"] = [s for s in SERIES if s in names.values()]
    series = series_by_measurement(rows, names)
    tails = ttft_tails(records or [])
    starts: dict[str, float] = {}
    for rec in records or []:
        if rec.get("wall_start") is not None:
            mid = rec["measurement_id"]
            starts[mid] = min(starts.get(mid, float("inf")), float(rec["wall_start"]))
    running_sets = adapter_sets(rows, engine, starts)
    groups: dict[tuple[str, int, bool], dict[str, list[dict]]] = {}
    for mid, pts in series.items():
        cond, burst, warm = parse_measurement_id(mid)
        groups.setdefault((cond, burst, warm), {})[mid] = pts
    for cond, burst in sorted({(c, b) for c, b, _ in groups}):
        measured = groups.get((cond, burst, False), {})
        source = "measurements"
        if not any(busy(p) for p in measured.values()):
            measured, source = groups.get((cond, burst, True), {}), "warm-up bursts"
        adapters = (conditions.get(cond) or {}).get("adapters") or []
        seen = [v for mid, v in running_sets.items() if parse_measurement_id(mid)[:2] == (cond, burst)]
        cell = QueueCell(
            condition=cond,
            burst=burst,
            distinct_adapters=len({a for a in adapters if a != "base"}),
            source=source,
            in_flight=_in_flight(measured, has_deferred),
            assignment=(conditions.get(cond) or {}).get("assignment", "cycle"),
            ttft=tails.get((cond, burst)),
            running_sets_seen=len(set().union(*(v["sets"] for v in seen))) if seen else None,
            adapters_seen_running=len(set().union(*(v["adapters"] for v in seen))) if seen else None,
            traces=_traces({k: v for k, v in measured.items() if busy(v)}),
        )
        cells.append(cell)
    return head


def aggregate(
    metric_files: list[str],
    fact_files: list[str],
    conditions: dict[str, Any],
    out: str | Path,
    record_files: list[str] | None = None,
) -> dict[str, Any]:
    """Every server's queue figures and the cliff comparisons, written to ``out`` (queues.json)."""
    servers = []
    recs = sorted(record_files) if record_files else [None] * len(metric_files)
    for mf, ff, rf in zip(sorted(metric_files), sorted(fact_files), recs, strict=True):
        facts = ServerFacts.from_json(read_json(ff))
        ok = facts.ok
        rows = list(read_jsonl(mf)) if ok else []
        records = list(read_jsonl(rf)) if ok and rf else []
        servers.append(server_queues(rows, facts, conditions, records))
    cells = [{**s, "cells": [c.to_json() for c in s["cells"]]} for s in servers]
    result = {"servers": cells, "cliffs": cliffs(servers)}
    write_json(out, result)
    return result


def cliffs(servers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per engine: the condition with more distinct adapters than the fewest slots (and no more than the most),
    at the largest burst both servers measured, on the fewest vs the most slots: batch, waiting and deferral.

    ``finding`` is ``smaller batch`` when the few-slot batch interval lies wholly below the many-slot one,
    ``no smaller batch`` when it lies wholly at or above it, ``overlap`` when the intervals overlap, and
    ``too few samples`` when either side has fewer than three measurements sampled in flight."""
    out = []
    lora = [s for s in servers if s.get("lora") and s.get("max_loras") and s.get("status") == "ok"]
    for engine in sorted({s["engine"] for s in lora}):
        eng = sorted((s for s in lora if s["engine"] == engine), key=lambda s: (s["max_loras"], s["server"]))
        few, many = eng[0], eng[-1]
        if few["max_loras"] == many["max_loras"]:
            continue
        cells_few: dict[tuple[str, int], QueueCell] = {(c.condition, c.burst): c for c in few["cells"]}
        cells_many: dict[tuple[str, int], QueueCell] = {(c.condition, c.burst): c for c in many["cells"]}
        shared = [
            k
            for k in cells_few
            if k in cells_many and few["max_loras"] < cells_few[k].distinct_adapters <= many["max_loras"]
        ]
        if not shared:
            continue
        top = max(b for _, b in shared)
        cond = sorted(c for c, b in shared if b == top)[-1]
        few_cell, many_cell = cells_few[(cond, top)], cells_many[(cond, top)]
        f, m = few_cell.in_flight, many_cell.in_flight
        if min(f.measurements_in_flight, m.measurements_in_flight) < 3:
            finding = "too few samples"
        elif f.batch_hi < m.batch_lo:  # type: ignore[operator]  # in flight: an interval
            finding = "smaller batch"
        elif f.batch_lo >= m.batch_hi:  # type: ignore[operator]
            finding = "no smaller batch"
        else:
            finding = "overlap"
        queued = f.deferred_mean if f.deferred_mean is not None else f.waiting_mean
        out.append(
            {
                "engine": engine,
                "condition": cond,
                "burst": top,
                "distinct_adapters": few_cell.distinct_adapters,
                "few": {
                    "server": few["server"],
                    "slots": few["max_loras"],
                    "metrics": few.get("metrics"),
                    **_brief(few_cell),
                },
                "many": {
                    "server": many["server"],
                    "slots": many["max_loras"],
                    "metrics": many.get("metrics"),
                    **_brief(many_cell),
                },
                "queue_series": "deferred" if f.deferred_mean is not None else "waiting",
                "queued_few": queued,
                "finding": finding,
            }
        )
    return out


def _brief(c: QueueCell) -> dict[str, Any]:
    """What a cliff comparison shows of each side's cell."""
    f = c.in_flight
    return {"batch_median": f.batch_median, "batch_lo": f.batch_lo, "batch_hi": f.batch_hi,
            "batch_coverage": f.batch_coverage, "measurements_in_flight": f.measurements_in_flight,
            "busy_samples": f.busy_samples, "waiting_mean": f.waiting_mean, "deferred_mean": f.deferred_mean,
            "deferred_share_pct": f.deferred_share_pct, "source": c.source}  # fmt: skip


def sampled_during(c: dict[str, Any]) -> bool:
    """Whether the harness scraped both sides of a cliff comparison during their measurements (harness.metrics:
    during), whatever those scrapes happened to catch in flight."""
    return c["few"].get("metrics") == "during" and c["many"].get("metrics") == "during"


def cliff_sentence(c: dict[str, Any]) -> str:
    """One plain sentence per cliff comparison, from its figures."""
    f, m = c["few"], c["many"]
    if c["finding"] == "too few samples":
        head = (
            f"{c['engine']}: too few measurements sampled while requests were in flight ({f['measurements_in_flight']}"
            f" and {m['measurements_in_flight']}; three are needed) to tell"
        )
        if sampled_during(c):
            # Scraped during the bursts, yet too few scrapes saw requests in flight: bursts short against the
            # polling period, or a front end that answered late. (Until 2026-12-06 the client's own pool, as large
            # as the burst, held every poll until the burst's first requests finished: metrics.METRICS_CONNECTIONS.)
            return (
                f"{head}: too few of the scrapes taken during the bursts came back while requests were in flight;"
                " longer bursts or a shorter metrics_interval_s give more."
            )
        return f"{head}; set harness.metrics: during."

    def b(x: dict[str, Any]) -> str:
        return f"{x['batch_median']:.2f} [{x['batch_lo']:.2f}, {x['batch_hi']:.2f}]"

    q = c["queue_series"]
    share = f", deferral in {f['deferred_share_pct']:.0f}% of in-flight samples" if q == "deferred" else ""
    queued = c["queued_few"]
    verdict = {
        "smaller batch": "the batch on fewer slots is smaller beyond both intervals",
        "no smaller batch": "the batch on fewer slots is not smaller",
        "overlap": "the intervals overlap: no difference in batch size shown",
    }[c["finding"]]
    return (
        f"{c['engine']}, {c['condition']} ({c['distinct_adapters']} adapters), burst {c['burst']}: requests "
        f"running together {b(f)} on {f['slots']} slots against {b(m)} on {m['slots']} slots; mean {q} "
        f"{queued:.2f} on {f['slots']} slots{share}; {verdict}."
    )
