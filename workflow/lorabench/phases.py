"""LoRA's cost split by phase: an adapter mix's TTFT (prefill, where its prompts are long) and ITL (decode)
against the reference condition of its own workload on the same server, at the same burst size.

A cell's TTFT and ITL are the medians of its streamed bursts; two cells of one server job pair their bursts of one
cycle (stats.ratio_span with the per-cycle series the summary keeps, ``ttft_by_cycle`` and ``itl_by_cycle``), so
each ratio comes with the 95 % interval of its median, as throughput's do. Cells without enough pairs get the
ratio of their medians and no interval. A long-prompt, short-output workload shows the prefill side in TTFT, a
short-prompt, long-output one the decode side in ITL.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .facts import ServerFacts
from .stats import paired_ratios, ratio_span

WIDE_POINTS = 10.0  # a ratio whose interval reaches further than this from its median is marked wide


def reading(pct: float | None, lo: float | None, hi: float | None) -> str | None:
    """What a ratio with its interval lets a reader say: "wide" (the interval reaches more than WIDE_POINTS from
    the median: not a finding), "includes 0" (no change told apart from none), None where it decides (or where
    there is no interval to judge by: the table then shows none)."""
    if pct is None or lo is None or hi is None:
        return None
    if max(pct - lo, hi - pct) > WIDE_POINTS:
        return "wide"
    if lo <= 0 <= hi:
        return "includes 0"
    return None


def _ratio(num: dict[str, Any], den: dict[str, Any], prefix: str) -> tuple[float | None, float | None, float | None]:
    """(ratio %, lo %, hi %) of num / den for TTFT or ITL: paired per cycle where the cells pair, else the ratio
    of their medians without an interval."""
    if paired_ratios(num, den, prefix):
        span = ratio_span(num, den, prefix)
        if span:
            return span
    a, b = num.get(f"{prefix}_median_ms"), den.get(f"{prefix}_median_ms")
    if a is None or not b or math.isnan(a) or math.isnan(b):
        return None, None, None
    return 100 * (a / b - 1), None, None


def phase_costs(rows: list[dict[str, Any]], facts: Mapping[str, ServerFacts]) -> list[dict[str, Any]]:
    """Per server, workload, burst size and condition (the reference included, as its own row): TTFT and ITL
    medians, prompt tokens per request, and the TTFT and ITL ratios against the reference of its workload."""
    by_cell = {(r["server"], r["condition"], r["burst"]): r for r in rows if r.get("status") == "ok"}
    out = []
    for (server, cond, burst), num in sorted(by_cell.items()):
        cfg = facts[server].config if server in facts else {}
        ref = (cfg.get("references") or {}).get(cond) or cfg.get("reference") or (cfg.get("conditions") or [cond])[0]
        den = by_cell.get((server, ref, burst))
        row: dict[str, Any] = {
            "server": server,
            "engine": num.get("engine"),
            "workload": num.get("workload"),
            "burst": burst,
            "condition": cond,
            "adapters": num.get("adapters"),
            "reference": ref,
            "prompt_tokens_per_request": num.get("prompt_tokens_per_request"),
            "ttft_median_ms": num.get("ttft_median_ms"),
            "itl_median_ms": num.get("itl_median_ms"),
        }
        for prefix in ("ttft", "itl"):
            pct, lo, hi = _ratio(num, den, prefix) if den is not None and cond != ref else (None, None, None)
            row.update({f"{prefix}_ratio_pct": pct, f"{prefix}_ratio_lo_pct": lo, f"{prefix}_ratio_hi_pct": hi})
            row[f"{prefix}_reading"] = reading(pct, lo, hi)
        out.append(row)
    return sorted(
        out,
        key=lambda r: (r["server"], r["workload"] or "", r["burst"], r["condition"] != r["reference"], r["condition"]),
    )


def workload_rows(config: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The workloads the study's conditions use, for the report: name, what it asks for (its description, else
    its lengths in words), its conditions and the prompt tokens per request the servers reported (median over its
    measured cells)."""
    from .loadgen.traffic import WorkloadError, workload_of, workload_specs

    try:
        specs = workload_specs(config.get("workload") or {}, config.get("workloads"))
    except WorkloadError:
        specs = {}
    conds = config.get("conditions") or {}
    out = []
    for name in sorted({workload_of(c) for c in conds.values()}):
        spec = specs.get(name)
        tokens = sorted(
            float(r["prompt_tokens_per_request"])
            for r in rows
            if r.get("workload") == name and r.get("prompt_tokens_per_request") is not None
        )
        out.append(
            {
                "name": name,
                "description": (spec.description if spec else "") or "",
                "lengths": spec.describe() if spec else "",
                "conditions": sorted(c for c, v in conds.items() if workload_of(v) == name),
                "prompt_tokens_per_request": tokens[len(tokens) // 2] if tokens else None,
            }
        )
    return out
