"""Plots for the report (matplotlib, Agg): throughput per condition with spread, the slot cliff, TTFT/ITL spread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402


def _save(fig: Figure, out: Path) -> Path:
    """Lay out ``fig``, write it to ``out`` (the format its suffix names) and close it: every plot of the report."""
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def throughput_by_condition(rows: list[dict[str, Any]], out: Path, burst: int) -> Path | None:
    rows = [r for r in rows if r.get("burst") == burst and r.get("status") == "ok" and r.get("throughput_median")]
    if not rows:
        return None
    servers = sorted({r["server"] for r in rows})
    conditions: list[str] = []
    for r in rows:
        if r["condition"] not in conditions:
            conditions.append(r["condition"])
    fig, ax = plt.subplots(figsize=(8, 3.8), dpi=110)
    width = 0.8 / len(servers)
    for i, s in enumerate(servers):
        xs, ys, lo, hi = [], [], [], []
        for j, c in enumerate(conditions):
            match = [r for r in rows if r["server"] == s and r["condition"] == c]
            if match:
                r = match[0]
                xs.append(j + i * width)
                ys.append(r["throughput_median"])
                lo.append(r["throughput_median"] - r["throughput_min"])
                hi.append(r["throughput_max"] - r["throughput_median"])
        ax.bar(xs, ys, width=width, label=s, yerr=[lo, hi], capsize=3)
    ax.set_xticks([j + width * (len(servers) - 1) / 2 for j in range(len(conditions))], conditions)
    ax.set_ylabel("output tok/s (median, min-max)")
    ax.set_title(f"Throughput per condition, burst of {burst}")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, out)


def slot_cliff(rows: list[dict[str, Any]], out: Path, skip: str | None = None) -> Path | None:
    """Throughput against slots per engine, condition and burst, for each measured on servers of two or more slot
    counts; the condition ``skip`` (the base model's: it uses no slot) left out. None where no condition was
    measured on two slot counts (a study of one LoRA server, or of servers of one slot count): no empty chart."""
    rows = [
        r
        for r in rows
        if r.get("lora") and r.get("max_loras") and r.get("status") == "ok" and r.get("throughput_median")
    ]
    lines = []
    for engine, cond, burst in sorted({(r["engine"], r["condition"], r["burst"]) for r in rows}):
        sel = sorted(
            (r for r in rows if (r["engine"], r["condition"], r["burst"]) == (engine, cond, burst)),
            key=lambda r: r["max_loras"],
        )
        if len({r["max_loras"] for r in sel}) >= 2 and cond != skip:
            lines.append((f"{engine} {cond} (burst {burst})", sel))
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=110)
    for label, sel in lines:
        ax.plot([r["max_loras"] for r in sel], [r["throughput_median"] for r in sel], marker="o", label=label)
    ax.set_xticks(sorted({int(r["max_loras"]) for _, sel in lines for r in sel}))  # slot counts are whole numbers
    ax.set_xlabel("slots (max LoRAs per batch)")
    ax.set_ylabel("output tok/s (median)")
    ax.set_title("Slot cliff: more distinct adapters than slots")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, out)


def latency_spread(measurements: list[dict[str, Any]], out: Path, metric: str, label: str) -> Path | None:
    ms = [m for m in measurements if not m.get("warmup") and m.get(metric) is not None]
    if not ms:
        return None
    keys = sorted({(m["server"], m["condition"]) for m in ms})
    data = [[m[metric] for m in ms if (m["server"], m["condition"]) == k] for k in keys]
    fig, ax = plt.subplots(figsize=(8, 3.8), dpi=110)
    ax.boxplot(data, showfliers=True)
    ax.set_xticks(range(1, len(keys) + 1), [f"{s}\n{c}" for s, c in keys], fontsize=7)
    ax.set_ylabel(label)
    ax.set_title(f"{label} per measurement (all burst sizes)")
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, out)


def queue_traces(queues: dict[str, Any], out: Path, conditions: list[str]) -> Path | None:
    """Requests running (the batch), waiting and deferred over time within measurements, one panel per LoRA
    server (by slots) and condition, at each server's largest burst; several measurements overlaid."""
    servers = sorted(
        (s for s in queues.get("servers", []) if s.get("lora") and s.get("status") == "ok"),
        key=lambda s: (s["engine"], s.get("max_loras") or 0, s["server"]),
    )
    panels: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for s in servers:
        traced = [c for c in s["cells"] if c.get("traces") and c["condition"] in conditions]
        if not traced:
            continue
        top = max(c["burst"] for c in traced)
        panels.append(
            (s, sorted((c for c in traced if c["burst"] == top), key=lambda c: conditions.index(c["condition"])))
        )
    if not panels:
        return None
    ncols = max(len(cells) for _, cells in panels)
    fig, axes = plt.subplots(len(panels), ncols, figsize=(3.2 * ncols, 2.4 * len(panels)), dpi=110, squeeze=False)
    styles = (("running", 1, "-", "tab:blue"), ("waiting", 2, "--", "tab:orange"), ("deferred", 3, ":", "tab:red"))
    for i, (s, cells) in enumerate(panels):
        for j in range(ncols):
            ax = axes[i][j]
            if j >= len(cells):
                ax.axis("off")
                continue
            c = cells[j]
            for k, trace in enumerate(c["traces"]):
                t = [p[0] for p in trace]
                for name, col, ls, color in styles:
                    if name not in s.get("reports", []):
                        continue
                    ax.step(t, [p[col] for p in trace], where="post", ls=ls, color=color, alpha=0.8,
                            label=name if k == 0 else None)  # fmt: skip
            ax.set_title(f"{s['server']} ({s['max_loras']} slots): {c['condition']}, burst {c['burst']}", fontsize=8)
            ax.set_xlabel("s since measurement start", fontsize=7)
            ax.set_ylabel("requests", fontsize=7)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.suptitle("Batch (running) and queues (waiting, deferred for a slot) within measurements", fontsize=9)
    return _save(fig, out)


def adapter_scaling(rows: list[dict[str, Any]], out: Path) -> Path | None:
    """Throughput (median, 95 % interval) and TTFT p99 against the number of adapters, one line per server and
    assignment, at each server's largest burst."""
    rows = [r for r in rows if r.get("status") == "ok" and r.get("throughput_median")]
    if not rows:
        return None
    top = {s: max(r["burst"] for r in rows if r["server"] == s) for s in {r["server"] for r in rows}}
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
    for server, assignment in sorted({(r["server"], r["assignment"]) for r in rows}):
        sel = sorted(
            (r for r in rows if (r["server"], r["assignment"]) == (server, assignment) and r["burst"] == top[server]),
            key=lambda r: r["n_adapters"],
        )
        xs = [r["n_adapters"] for r in sel]
        ys = [r["throughput_median"] for r in sel]
        lo = [r["throughput_median"] - (r.get("throughput_ci_lo") or r["throughput_median"]) for r in sel]
        hi = [(r.get("throughput_ci_hi") or r["throughput_median"]) - r["throughput_median"] for r in sel]
        label = f"{server} {assignment} (burst {top[server]})"
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
        p99 = [(r["n_adapters"], r["ttft_p99_ms"]) for r in sel if r.get("ttft_p99_ms") is not None]
        if p99:
            ax2.plot([p[0] for p in p99], [p[1] for p in p99], marker="s", label=label)
    counts = sorted({r["n_adapters"] for r in rows})
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_xticks(counts, [str(n) for n in counts])
        a.minorticks_off()
        a.set_xlabel("adapters in the condition")
        a.grid(alpha=0.3)
    ax.set_ylabel("output tok/s (median, 95 % interval)")
    ax.set_title("Throughput against adapter count")
    ax2.set_ylabel("TTFT p99 (ms)")
    ax2.set_title("TTFT tail against adapter count")
    ax.legend(fontsize=6)
    return _save(fig, out)


def effects(rows: list[tuple[str, float, float, float, bool]], out: Path, title: str) -> Path | None:
    """A forest plot: each effect (label, ratio %, interval low %, high %, paired) as a point on its 95 % interval,
    a line at 0 (no difference); paired effects filled, unpaired ones (two servers measured one after the other)
    hollow, their bars dashed. None without effects."""
    rows = [r for r in rows if all(x == x for x in r[1:4])]  # NaN-free
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.28 * len(rows)), dpi=110)
    for y, (_, mid, lo, hi, paired) in enumerate(reversed(rows)):
        ax.plot([lo, hi], [y, y], color="#345", linestyle="-" if paired else "--", linewidth=1.6)
        ax.plot([mid], [y], marker="o", color="#345", markerfacecolor="#345" if paired else "white")
    ax.axvline(0, color="#999", linewidth=0.8)
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)], fontsize=7)
    ax.set_xlabel(
        "throughput difference, % (95 % interval)\nfilled: paired per cycle; hollow, dashed: unpaired", fontsize=8
    )
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, out)
