"""Typed records of the analysis: comparisons between cells, as the summary writes them (summary.json
``comparisons``, ``engine_comparison``, ``burst_scaling``) and the report and claims read them.

Each record has one serializer (``to_json``, the field names summary.json has always had) and one reader
(``from_json``); ``RatioSpan`` is the one ratio-with-interval type they share: num / den - 1 in percent, with the
ends of its 95 % interval (paired per cycle where the cells were measured in cycles, else the span the two medians'
intervals allow; ``stats.ratio_span``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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

    @property
    def within_target(self) -> bool | None:
        half = self.ratio.halfwidth_points
        return None if self.target_points is None or math.isnan(half) else bool(half <= self.target_points)

    def to_json(self) -> dict[str, Any]:
        return {"server": self.server, "engine": self.engine, "burst": self.burst, "condition": self.condition,
                "reference": self.reference, "workload": self.workload, **self.ratio.to_json(),
                "halfwidth_points": _json_num(self.ratio.halfwidth_points), "pairs": self.pairs,
                "paired_by": self.paired_by, "target_points": self.target_points,
                "within_target": self.within_target, "bound": self.bound}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Comparison:
        return cls(d["server"], d.get("engine"), int(d["burst"]), d["condition"], d["reference"], d.get("workload"),
                   RatioSpan.from_json(d), int(d.get("pairs") or 0), d.get("paired_by") or "unpaired",
                   d.get("target_points"), d.get("bound") or "")  # fmt: skip


@dataclass(frozen=True)
class EngineSide:
    """One engine's cell in an engine comparison."""

    engine: str
    server: str
    tok_s: float
    spread_pct: float | None


@dataclass(frozen=True)
class EngineComparison:
    """The same LoRA setting, condition and burst on two engines (b over a), unpaired: two servers are never up
    together, so the interval is the span the two medians' intervals allow."""

    lora: bool
    slots: int | None
    condition: str
    burst: int
    a: EngineSide
    b: EngineSide
    ratio: RatioSpan

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"lora": self.lora, "slots": self.slots, "condition": self.condition,
                               "burst": self.burst}  # fmt: skip
        for tag, side in (("a", self.a), ("b", self.b)):
            out |= {f"{tag}_engine": side.engine, f"{tag}_server": side.server, f"{tag}_tok_s": side.tok_s,
                    f"{tag}_spread_pct": side.spread_pct}  # fmt: skip
        return out | self.ratio.to_json()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EngineComparison:
        sides = [EngineSide(d[f"{t}_engine"], d[f"{t}_server"], d[f"{t}_tok_s"], d.get(f"{t}_spread_pct"))
                 for t in ("a", "b")]  # fmt: skip
        return cls(bool(d["lora"]), d.get("slots"), d["condition"], int(d["burst"]), sides[0], sides[1],
                   RatioSpan.from_json(d))  # fmt: skip


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
