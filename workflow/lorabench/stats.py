"""Statistics as small typed value objects: a distribution summary and warm-up detection."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Summary:
    """Median, min, max and spread of a set of values; spread is half the range as a percent of the median
    (the source study's "±x%")."""

    n: int
    median: float
    min: float
    max: float
    mean: float
    spread_pct: float

    @classmethod
    def of(cls, values: list[float]) -> Summary:
        vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
        if not vals:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan, nan)
        med = statistics.median(vals)
        spread = 100.0 * (max(vals) - min(vals)) / (2 * med) if med else float("nan")
        return cls(len(vals), med, min(vals), max(vals), statistics.fmean(vals), spread)

    def as_dict(self, prefix: str) -> dict[str, Any]:
        return {f"{prefix}_{k}": v for k, v in asdict(self).items()}

    def fmt(self, digits: int = 0) -> str:
        if self.n == 0:
            return "n/a"
        f = f"{{:,.{digits}f}}"
        return f"{f.format(self.median)} [{f.format(self.min)}-{f.format(self.max)}] n={self.n}"


def first_stands_out(values_in_time_order: list[float], min_pct: float = 3.0) -> tuple[bool, float]:
    """Whether the first measured value deviates from the median of the rest by more than the rest's own range
    (and at least ``min_pct``). Returns (flag, deviation in percent)."""
    if len(values_in_time_order) < 3:
        return False, float("nan")
    first, rest = values_in_time_order[0], values_in_time_order[1:]
    med = statistics.median(rest)
    if not med:
        return False, float("nan")
    dev = 100.0 * (first - med) / med
    rest_range = 100.0 * (max(rest) - min(rest)) / med
    return abs(dev) > max(min_pct, rest_range), dev
