"""Statistics as small typed value objects: a distribution summary and warm-up detection."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from .median import MedianInterval as MedianInterval
from .median import outliers_below as outliers_below


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


def fmt_num(v: Any, digits: int | None = None) -> str:
    """A figure for people: thousands separators, ``digits`` decimals (by default 3 below 1, else 1), "-" for a
    missing or NaN value, yes/no for booleans. The report and the claims' texts both use it."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        d = digits if digits is not None else (3 if abs(v) < 1 else 1)
        return f"{v:,.{d}f}"
    return str(v)


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


def reached_target(values: list[float], target_pct: float, min_n: int, level: float = 0.95) -> bool:
    """The stopping rule of adaptive repetitions: at least ``min_n`` values, an interval that really covers
    ``level`` (so at least six values at 95 %), and that interval within ±``target_pct`` of the median."""
    iv = MedianInterval.of(values, level)
    return iv.n >= min_n and iv.coverage >= level and iv.halfwidth_pct <= target_pct


def _num(row: Any, key: str) -> float | None:
    return _as_float(row.get(key) if hasattr(row, "get") else None)


def _as_float(raw: Any) -> float | None:
    """``raw`` as a number, None where it is none (missing, not a number, NaN)."""
    try:
        v = float(raw)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


MIN_PAIRED = 6  # pairs two cells of one job need for a paired interval (the fewest whose interval covers 95 %)


def by_time(points: list[tuple[int, int, float]]) -> str:
    """A cell's measurement figures with where each was taken (server start, position in the job's order), as
    ``paired_ratios`` pairs them: ``"START.ORDER:VALUE ..."``."""
    return " ".join(f"{s}.{o}:{v:.6g}" for s, o, v in sorted(points))


def row_group(row: Any) -> str | None:
    """The co-resident group a summary row's server was measured in (None: a server job of its own)."""
    g = row.get("group") if hasattr(row, "get") else None
    return g if isinstance(g, str) and g else None


def _timed(row: Any, prefix: str, by: str = "time") -> list[tuple[int, int, float]]:
    raw = row.get(f"{prefix}_by_{by}") if hasattr(row, "get") else None
    if not isinstance(raw, str) or not raw:
        return []
    try:
        out = []
        for item in raw.split():
            where, value = item.split(":")
            start, order = where.split(".")
            out.append((int(start), int(order), float(value)))
        return out
    except ValueError:
        return []


def paired_ratios(num: Any, den: Any, prefix: str = "throughput") -> list[float]:
    """num/den for pairs of measurements taken close together: two cells of one server job. Method v2: the bursts
    of one cycle (``PREFIX_by_cycle``). Older studies: each measurement of
    one paired with the nearest in the job's order of the other on the same server start (closest pairs first,
    each measurement used once). A slow spell of the host that outlasts the gap between the two slows both and
    cancels in their ratio. Two cells of different servers of one co-resident group (``group``, lorabench.group)
    share their cycles and pair as two cells of one server do, by cycle only. Empty where the cells are of
    different servers outside one group or make fewer than ``MIN_PAIRED`` pairs."""
    if not hasattr(num, "get") or not hasattr(den, "get"):
        return []
    same_server = bool(num.get("server")) and num.get("server") == den.get("server")
    group = row_group(num)
    if not same_server and not (group and group == row_group(den)):
        return []
    ca, cb = _timed(num, prefix, "cycle"), _timed(den, prefix, "cycle")
    if ca and cb:  # method v2: bursts of one cycle, exactly
        by = {(s, c): v for s, c, v in cb}
        pairs = [v / by[(s, c)] for s, c, v in ca if by.get((s, c))]
        return pairs if len(pairs) >= MIN_PAIRED else []
    if not same_server:
        return []
    a, b = _timed(num, prefix), _timed(den, prefix)
    gaps = sorted(
        (abs(oa - ob), i, j) for i, (sa, oa, _) in enumerate(a) for j, (sb, ob, _) in enumerate(b) if sa == sb
    )
    used_a: set[int] = set()
    used_b: set[int] = set()
    pairs = []
    for _, i, j in gaps:
        if i not in used_a and j not in used_b and b[j][2]:
            used_a.add(i)
            used_b.add(j)
            pairs.append(a[i][2] / b[j][2])
    return pairs if len(pairs) >= MIN_PAIRED else []


def ratio_span(num: Any, den: Any, prefix: str = "throughput") -> tuple[float, float, float] | None:
    """Ratio of two cells and its span, in percent. Two cells of one server job are paired
    (``paired_ratios``): the median of their paired ratios and that median's 95 % interval. Otherwise (two
    servers, or too few pairs) the ratio of the medians and the span their 95 % intervals allow (num lo / den hi
    .. num hi / den lo); cells without intervals fall back to their range (min/max). With fewer than nine values
    an interval is the range itself; with more, it leaves the most extreme values out as the order statistics
    allow."""
    pairs = paired_ratios(num, den, prefix)
    if pairs:
        iv = MedianInterval.of(pairs)
        return 100 * (iv.median - 1), 100 * (iv.lo - 1), 100 * (iv.hi - 1)
    med_a, med_b = _num(num, f"{prefix}_median"), _num(den, f"{prefix}_median")
    if med_a is None or not med_b:
        return None

    def ends(row: Any) -> tuple[float | None, float | None]:
        lo, hi = _num(row, f"{prefix}_ci_lo"), _num(row, f"{prefix}_ci_hi")
        if lo is not None and hi is not None:
            return lo, hi
        return _num(row, f"{prefix}_min"), _num(row, f"{prefix}_max")

    (a_lo, a_hi), (b_lo, b_hi) = ends(num), ends(den)
    if a_lo is None or a_hi is None or not b_lo or not b_hi:
        return 100 * (med_a / med_b - 1), float("nan"), float("nan")
    return 100 * (med_a / med_b - 1), 100 * (a_lo / b_hi - 1), 100 * (a_hi / b_lo - 1)


def paced_by(values: list[float], pace: list[float], min_n: int = 6) -> float | None:
    """Pearson's r between a cell's burst figures and what paced each burst (the GPU's busy share), where it says
    something: at least ``min_n`` pairs with both varying, and r above 0 beyond chance at 5 % (Fisher's z:
    atanh(r) * sqrt(n - 3) > 1.96: r > 0.81 for 6 pairs, 0.60 for 9, 0.36 for 30). None otherwise."""
    pairs: list[tuple[float, float]] = []
    for v, p in zip(values, pace, strict=True):
        a, b = _as_float(v), _as_float(p)
        if a is not None and b is not None:
            pairs.append((a, b))
    xs, ys = [a for a, _ in pairs], [b for _, b in pairs]
    if len(pairs) < min_n or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    r = min(1.0, statistics.correlation(xs, ys))
    if r <= 0 or (r < 1 and math.atanh(r) * math.sqrt(len(pairs) - 3) <= 1.96):
        return None
    return r
