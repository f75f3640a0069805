"""Plots of rate sweeps (matplotlib, Agg): latency against offered rate per server and mix (p50 and p99, the median
over cycles at each rate), and capacity at the SLO per configuration with its interval."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .capacity import open_ends  # noqa: E402
from .measure.sweep import Capacity, Slo, SweepResult  # noqa: E402
from .plots import _save  # noqa: E402

METRICS = {
    "ttft": ("TTFT", "ttft_ms"),
    "itl": ("inter-token latency", "itl_ms"),
    "tpot": ("time per output token (per request)", "tpot_ms"),
    "e2e": ("end-to-end latency", "e2e_ms"),
}


def _median(values: list[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.median(vals) if vals else float("nan")


def rate_curve(res: SweepResult, prefix: str) -> list[tuple[float, float, float, bool]]:
    """(rate, p50, p99, over-saturated) per rate the sweep ran, in rising order: each the median over the runs at
    that rate, cycle 0's grid and the search's steps alike (the search places its steps on one lattice of the
    range, so the cycles repeat its rates); over-saturated where more than half of those runs were."""
    out = []
    for frac in sorted({p.fraction for p in res.points if p.measured}):
        pts = [p for p in res.points if p.fraction == frac and p.measured]
        over = sum(1 for p in pts if p.over_saturated) * 2 > len(pts)
        out.append(
            (
                _median([p.rate_per_s for p in pts]),
                _median([getattr(p, f"{prefix}_p50") for p in pts]),
                _median([getattr(p, f"{prefix}_p99") for p in pts]),
                over,
            )
        )
    return out


def latency_vs_rate(results: list[SweepResult], out: Path, metric: str = "ttft", slo: Slo | None = None) -> Path | None:
    """p50 (dashed) and p99 (solid) of ``metric`` against the offered rate, one colour per server and mix, through
    every rate the sweep ran (``rate_curve``: the median over the runs at that rate); rates over-saturated in most
    of their runs marked with a cross; each run's p99 one faint dot, so the spread between cycles shows; the SLO's
    bound on the metric, where it has one, as a grey line."""
    title, prefix = METRICS[metric]
    results = [r for r in results if r.points]
    if not results:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for i, res in enumerate(sorted(results, key=lambda r: (r.mix, r.server))):
        colour = f"C{i % 10}"
        curve = rate_curve(res, prefix)
        rates = [c[0] for c in curve]
        label = f"{res.server} / {res.mix}"
        ax.plot(rates, [c[2] for c in curve], "-o", color=colour, ms=3, label=f"{label} p99")
        ax.plot(rates, [c[1] for c in curve], "--", color=colour, alpha=0.7, label=f"{label} p50")
        over = [c for c in curve if c[3]]
        ax.plot([c[0] for c in over], [c[2] for c in over], "x", color=colour, ms=9)
        runs = [p for p in res.points if p.measured]
        ax.plot([p.rate_per_s for p in runs], [getattr(p, f"{prefix}_p99") for p in runs], ".", color=colour,
                ms=3, alpha=0.35, label=f"{label} p99, each run")  # fmt: skip
    bound = getattr(slo, f"{metric}_p99_ms", None) if slo else None  # e2e has none
    if bound:
        ax.axhline(bound, color="grey", lw=1, ls=":", label=f"SLO p99 {bound:g} ms")
    ax.set_yscale("log")
    ax.set_xlabel("offered rate (requests/s, Poisson)")
    ax.set_ylabel(f"{title} (ms)")
    ax.set_title(f"{title} against rate (median of the runs at a rate; x: over-saturated)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, out)


def capacity_by_config(capacities: list[Capacity], out: Path) -> Path | None:
    """Capacity at the SLO per server, one group per mix: the median over cycles with its interval; a capacity
    of which a cycle gave only a bound (outside the measured rates) hatched."""
    caps = [c for c in capacities if c.n]
    if not caps:
        return None
    mixes = sorted({c.mix for c in caps})
    servers = sorted({c.server for c in caps})
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.35 * len(caps) + 0.3 * len(mixes)), dpi=110)
    y = 0.0
    ticks, labels = [], []
    for mix in mixes:
        for c in sorted((c for c in caps if c.mix == mix), key=lambda c: servers.index(c.server)):
            err = [[c.capacity_per_s - c.lo], [c.hi - c.capacity_per_s]]
            ax.barh(
                y,
                c.capacity_per_s,
                xerr=err,
                capsize=3,
                color=f"C{servers.index(c.server) % 10}",
                hatch="//" if c.censored else None,
            )
            # an end that is a bound (a censored cycle's figure: ``open_ends``) goes on past its cap: an arrow
            lo_open, hi_open = open_ends(c)
            for is_open, x, mark in ((lo_open, c.lo, "<"), (hi_open, c.hi, ">")):
                if is_open:
                    ax.plot([x], [y], marker=mark, color="black", markersize=6, clip_on=False)
            ticks.append(y)
            labels.append(f"{mix} · {c.server}")
            y += 1
        y += 0.5
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.invert_yaxis()
    slo = caps[0].slo
    within = slo.text
    ax.set_xlabel(
        "requests/s within the SLO: median over cycles and its 95 % interval\n"
        "hatched: a cycle out of the measured rates; an arrow: that end of the interval is a bound",
        fontsize=8,
    )
    ax.set_title(f"Capacity at {within}")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, out)
