"""Comparisons within one server job, paired per cycle (method v2).

A cycle holds one burst of every cell of the server, so two cells' bursts of one cycle were taken seconds apart:
a slow spell of the host or the GPU that outlasts a cycle slows both and cancels in their ratio. A comparison's
figure is the median of the per-cycle ratios, with the distribution-free 95 % interval of that median
(``median.MedianInterval``); its width in points (100 x the larger distance from the median to an end) is what the
stop rule holds against its target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..median import MedianInterval

CycleKey = tuple[int, int]  # (server start, cycle)


class PairedRatio(MedianInterval):
    """num / den over the cycles both were measured in: the median of the per-cycle ratios and its 95 % interval
    (a ``MedianInterval`` of the ratios, as fractions)."""

    @classmethod
    def of_pairs(cls, num: Mapping[CycleKey, float], den: Mapping[CycleKey, float]) -> PairedRatio:
        ratios = [num[k] / den[k] for k in sorted(set(num) & set(den)) if den[k] and not math.isnan(num[k])]
        iv = MedianInterval.of(ratios)
        return cls(iv.n, iv.median, iv.lo, iv.hi, iv.coverage)

    @property
    def pct(self) -> float:
        return 100 * (self.median - 1) if self.n else float("nan")

    @property
    def halfwidth_points(self) -> float:
        """The larger distance from the median ratio to an end of its interval, in percentage points."""
        if not self.n:
            return float("nan")
        return 100 * max(self.median - self.lo, self.hi - self.median)

    def within(self, target_points: float, level: float = 0.95) -> bool:
        """Whether the interval really covers ``level`` (six pairs at least) and is within ±``target_points``."""
        return self.coverage >= level and self.halfwidth_points <= target_points
