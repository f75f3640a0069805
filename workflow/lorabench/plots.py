"""Plots for the report (matplotlib, Agg): throughput per condition with spread, the slot cliff, TTFT/ITL spread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


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
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def slot_cliff(rows: list[dict[str, Any]], out: Path) -> Path | None:
    rows = [
        r
        for r in rows
        if r.get("lora") and r.get("max_loras") and r.get("status") == "ok" and r.get("throughput_median")
    ]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=110)
    for engine, cond, burst in sorted({(r["engine"], r["condition"], r["burst"]) for r in rows}):
        sel = sorted(
            (r for r in rows if (r["engine"], r["condition"], r["burst"]) == (engine, cond, burst)),
            key=lambda r: r["max_loras"],
        )
        if len(sel) < 2 or cond == "base":
            continue
        ax.plot(
            [r["max_loras"] for r in sel],
            [r["throughput_median"] for r in sel],
            marker="o",
            label=f"{engine} {cond} (burst {burst})",
        )
    ax.set_xticks(sorted({int(r["max_loras"]) for r in rows}))  # slot counts are whole numbers
    ax.set_xlabel("slots (max LoRAs per batch)")
    ax.set_ylabel("output tok/s (median)")
    ax.set_title("Slot cliff: more distinct adapters than slots")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


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
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
