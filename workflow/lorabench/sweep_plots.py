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
    "e2e": ("end-to-end latency", "e2e_ms"),
}


def _median(values: list[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.median(vals) if vals else float("nan")


def latency_vs_rate(results: list[SweepResult], out: Path, metric: str = "ttft", slo: Slo | None = None) -> Path | None:
    """p50 (dashed) and p99 (solid) of ``metric`` against the offered rate, one colour per server and mix; each
    point of the grid the median over the cycles at that rate; over-saturated rates (in any cycle) marked with a
    cross; the search's steps (rates off the grid) one dot each; the SLO's bound on the metric, where it has one,
    as a grey line."""
    title, prefix = METRICS[metric]
    results = [r for r in results if r.points]
    if not results:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for i, res in enumerate(sorted(results, key=lambda r: (r.mix, r.server))):
        colour = f"C{i % 10}"
        rates, p50, p99, over = [], [], [], []
        for frac in sorted(res.fractions):
            pts = [p for p in res.points if p.fraction == frac]
            rates.append(_median([p.rate_per_s for p in pts]))
            p50.append(_median([getattr(p, f"{prefix}_p50") for p in pts]))
            p99.append(_median([getattr(p, f"{prefix}_p99") for p in pts]))
            over.append(any(p.over_saturated for p in pts))
        label = f"{res.server} / {res.mix}"
        ax.plot(rates, p99, "-o", color=colour, ms=3, label=f"{label} p99")
        ax.plot(rates, p50, "--", color=colour, alpha=0.7, label=f"{label} p50")
        xs = [r for r, o in zip(rates, over, strict=True) if o]
        ys = [v for v, o in zip(p99, over, strict=True) if o]
        ax.plot(xs, ys, "x", color=colour, ms=9)
        # the search's steps (later cycles, rates off the grid): their p99 one dot each
        grid = set(res.fractions)
        steps = [p for p in res.points if p.fraction not in grid and p.measured]
        if steps:
            ax.plot([p.rate_per_s for p in steps], [getattr(p, f"{prefix}_p99") for p in steps], ".", color=colour,
                    ms=4, alpha=0.6, label=f"{label} p99, search steps")  # fmt: skip
    bound = {"ttft": slo.ttft_p99_ms, "itl": slo.itl_p99_ms}.get(metric) if slo else None
    if bound:
        ax.axhline(bound, color="grey", lw=1, ls=":", label=f"SLO p99 {bound:g} ms")
    ax.set_yscale("log")
    ax.set_xlabel("offered rate (requests/s, Poisson)")
    ax.set_ylabel(f"{title} (ms)")
    ax.set_title(f"{title} against rate (median over the cycles at a rate; x: over-saturated)")
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
    within = ", ".join(
        f"p99 {name} <= {v:g} ms" for name, v in (("TTFT", slo.ttft_p99_ms), ("ITL", slo.itl_p99_ms)) if v is not None
    )
    ax.set_xlabel(
        "requests/s within the SLO: median over cycles and its 95 % interval\n"
        "hatched: a cycle out of the measured rates; an arrow: that end of the interval is a bound",
        fontsize=8,
    )
    ax.set_title(f"Capacity at {within}")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, out)
