"""One row of ``measurements.jsonl``: a burst (method v2), as one typed record.

``Burst`` is the row: which burst it was (server, cell, cycle, place in the job's order and in its cycle), what
it measured (``BurstFigures``: counts, throughput, latency percentiles) plus the engine's metrics over it, and what
came before it on the server (``slot_state.SlotState``: its predecessor and the adapters inferred resident; rows
written before the random order per cycle, 2026-12-07, lack these four fields). ``to_json`` writes the flat row
that ``lorabench.burst/2`` has always been (every field name and value as before, the slot state's fields added
beside them where recorded: a reader that does not know them reads the row as before, so the schema keeps its
version); ``from_json`` reads one back. The per-request rows of ``records.jsonl`` carry the same identity fields
(``Burst.identity``), not the slot state.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..loadgen.client import RequestRecord
from ..median import outliers_below
from .slot_state import SlotState

BURST_SCHEMA = "lorabench.burst/2"


def pct_ms(values: list[float], q: float) -> float:
    """The q-th percentile (0-100, linear between order statistics, as numpy's default) in milliseconds."""
    vals = sorted(v for v in values if v is not None and not math.isnan(v))
    if not vals:
        return float("nan")
    pos = (len(vals) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return 1000.0 * (vals[lo] + (vals[hi] - vals[lo]) * (pos - lo))


def median_ms(values: list[float]) -> float:
    return pct_ms(values, 50)


def _burst_figures(recs: list[RequestRecord]) -> tuple[float, int, float]:
    """(wall time, completed tokens, throughput) of one burst: first request start to last request end."""
    wall = max(r.end_s for r in recs) - min(r.start_s for r in recs)
    tokens = sum(r.completion_tokens for r in recs if r.ok)
    return wall, tokens, tokens / wall if wall > 0 else float("nan")


@dataclass(frozen=True)
class BurstFigures:
    """What one measurement (one or more consecutive bursts) measured; ``of`` says how."""

    n_requests: int
    n_ok: int
    n_errors: int
    errors: list[str]  # up to five distinct messages
    completion_tokens: int
    prompt_tokens: int
    duration_s: float  # first request's start to last request's end
    burst_s: float  # the bursts' summed wall time
    n_bursts: int
    burst_tok_s: list[float]
    outlier_bursts: int
    throughput_tok_s: float
    throughput_total_tok_s: float
    ttft_median_ms: float
    itl_median_ms: float
    latency_median_ms: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p90_ms: float
    itl_p99_ms: float
    latency_p50_ms: float
    latency_p90_ms: float
    latency_p99_ms: float
    wall_start: float

    @classmethod
    def of(cls, bursts: list[list[RequestRecord]], outlier_fraction: float = 0.75) -> BurstFigures:
        """``throughput_tok_s`` is the median of the bursts' own throughputs (tokens of the burst / its wall
        time), so one stalled burst cannot move it; ``throughput_total_tok_s`` is the source study's definition,
        all tokens over the bursts' summed wall time (the gaps between bursts, where the harness scrapes metrics,
        are not counted). Bursts slower than ``outlier_fraction`` x the median burst are counted in
        ``outlier_bursts``, never dropped. Throughput counts completed requests' tokens only; a measurement with
        any error is marked, never silently averaged."""
        records = [r for g in bursts for r in g]
        ok = [r for r in records if r.ok]
        figures = [_burst_figures(g) for g in bursts if g]
        walls = [f[0] for f in figures]
        burst_tps = [f[2] for f in figures]
        tokens = sum(r.completion_tokens for r in ok)
        itl = [x for r in ok for x in r.itl_s]
        errors = [r.error for r in records if not r.ok]
        burst_s = sum(walls)
        series = {"ttft": [r.ttft_s for r in ok], "itl": itl, "latency": [r.latency_s for r in ok]}
        return cls(
            n_requests=len(records),
            n_ok=len(ok),
            n_errors=len(errors),
            errors=sorted(set(errors))[:5],
            completion_tokens=tokens,
            prompt_tokens=sum(r.prompt_tokens for r in ok),
            duration_s=max(r.end_s for r in records) - min(r.start_s for r in records),
            burst_s=burst_s,
            n_bursts=len(bursts),
            burst_tok_s=[round(v, 3) for v in burst_tps],
            outlier_bursts=len(outliers_below(burst_tps, outlier_fraction)),
            throughput_tok_s=statistics.median(burst_tps) if burst_tps else float("nan"),
            throughput_total_tok_s=tokens / burst_s if burst_s > 0 else float("nan"),
            ttft_median_ms=median_ms(series["ttft"]),
            itl_median_ms=median_ms(itl),
            latency_median_ms=median_ms(series["latency"]),
            **{f"{name}_p{q}_ms": pct_ms(vals, q) for name, vals in series.items() for q in (50, 90, 99)},
            wall_start=min(r.wall_start for r in records),
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def measurement_row(
    bursts: list[list[RequestRecord]] | list[RequestRecord], base: dict[str, Any], outlier_fraction: float = 0.75
) -> dict[str, Any]:
    """One measurement's figures (``BurstFigures``) as a row beside the keys of ``base``; a flat list of records
    is one burst. For callers outside a server job (the fidelity benchmark); the job writes ``Burst`` rows."""
    groups: list[list[RequestRecord]] = (
        [list(bursts)] if bursts and isinstance(bursts[0], RequestRecord) else [list(b) for b in bursts]  # type: ignore[arg-type]
    )
    return {**base, **BurstFigures.of(groups, outlier_fraction).to_json()}


@dataclass
class Burst:
    """One row of ``measurements.jsonl``: a warm-up or measured burst of one cell (``cycle`` and ``position``
    only for measured ones), its figures and the engine's metrics over it (``metrics``, extended after the burst
    with the front end's CPU share, GPU clocks and busy share, the host's state over the cycle), and what came
    before it on the server (``slot_state``; None in rows written before it was recorded)."""

    server: str
    condition: str
    burst: int
    stream: bool
    rep: int  # the cycle (measured), or -1 - k for warm-up burst k
    order: int  # place in the job's order of measured bursts (-1 for warm-up)
    warmup: bool
    measurement_id: str
    server_start: int  # which of the job's server starts served it
    figures: BurstFigures
    metrics: dict[str, Any] = field(default_factory=dict)
    cycle: int | None = None
    position: int | None = None  # place in the cycle (0 first), in the cycle's order drawn at random
    slot_state: SlotState | None = None  # predecessor, adapters inferred resident at its start, its own adapters
    group: str | None = None  # the co-resident group whose job measured it (lorabench.group), None for a server's own
    group_position: int | None = None  # its place in the group's cycle (every member's bursts), 0 first

    def identity(self) -> dict[str, Any]:
        """The fields naming the burst (also on each of its requests' rows in ``records.jsonl``)."""
        out: dict[str, Any] = {"schema": BURST_SCHEMA}
        for f in fields(self):
            if f.name in ("figures", "metrics", "slot_state"):
                continue
            v = getattr(self, f.name)
            if v is not None or f.name not in ("cycle", "position", "group", "group_position"):
                out[f.name] = v
        return out

    def to_json(self) -> dict[str, Any]:
        state = self.slot_state.to_json() if self.slot_state is not None else {}
        return {**self.identity(), **state, **self.figures.to_json(), "metrics": self.metrics}

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> Burst:
        if row.get("schema") != BURST_SCHEMA:
            raise ValueError(f"burst row: schema {row.get('schema')!r}, expected {BURST_SCHEMA!r}")
        names = {f.name for f in fields(BurstFigures)}
        figures = BurstFigures(**{k: row[k] for k in names})
        own = {f.name for f in fields(cls)} - {"figures", "metrics", "slot_state"}
        return cls(figures=figures, metrics=dict(row.get("metrics") or {}), slot_state=SlotState.from_row(row),
                   **{k: row[k] for k in own if k in row})  # fmt: skip

    @property
    def ok(self) -> bool:
        return self.figures.n_errors == 0
