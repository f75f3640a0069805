"""The median's distribution-free interval and slow-burst detection: the statistics that measuring itself uses
(the cycles' stop rule, the paired comparisons, a measurement's outlier count). Kept apart from ``stats``, which
the analysis uses and re-exports these from, so that editing an analysis helper never changes the code of a
measuring job (its ``code`` inputs are its import closure, ``code_inputs``)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


# Coverage of the order-statistic interval [x_(k), x_(n+1-k)] for the median: P(k <= B <= n-k), B ~ Bin(n, 1/2).
def _coverage(n: int, k: int) -> float:
    return sum(math.comb(n, i) for i in range(k, n - k + 1)) / 2**n


@dataclass(frozen=True)
class MedianInterval:
    """A distribution-free interval for the median of ``n`` values: the ``k``-th smallest and ``k``-th largest
    value, with the widest ``k`` whose coverage is still at least ``level``. Below six values no pair of order
    statistics reaches 95 %: the interval is then the range [min, max] and ``coverage`` says how much it covers
    (75 % for 3 values, 87.5 % for 4, 93.8 % for 5)."""

    n: int
    median: float
    lo: float
    hi: float
    coverage: float

    @classmethod
    def of(cls, values: list[float], level: float = 0.95) -> MedianInterval:
        vals = sorted(float(v) for v in values if v is not None and not math.isnan(float(v)))
        n = len(vals)
        if n == 0:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan)
        k = 1
        while k + 1 <= n // 2 and _coverage(n, k + 1) >= level:
            k += 1
        return cls(n, statistics.median(vals), vals[k - 1], vals[n - k], _coverage(n, k) if n > 1 else 0.0)

    @property
    def halfwidth_pct(self) -> float:
        """The larger distance from the median to an end of the interval, in percent of the median."""
        if not self.n or not self.median:
            return float("nan")
        return 100.0 * max(self.median - self.lo, self.hi - self.median) / abs(self.median)


def outliers_below(values: list[float], fraction: float) -> list[int]:
    """Indices of values below ``fraction`` x their median (slow bursts of one measurement); counted and shown,
    never dropped."""
    vals = [float(v) for v in values]
    if not vals:
        return []
    med = statistics.median(vals)
    return [i for i, v in enumerate(vals) if v < fraction * med]
