"""The A/A check of method v2: a condition that repeats another (the same adapters, a cell of its own in the
rotation, e.g. ``base-aa: {adapters: [base]}``) compared with it, paired per cycle. Its ratio must be 0 within its
95 % interval; the interval's width is what the method can tell apart on that server.

usage: .venv/bin/python benchmarks/aa_check.py STUDY_OR_RESULTS_DIR [...]
       (a folder holding summary/summary.json, as results/ and studies/NAME/ do)

Prints one line per A/A comparison and per server the other comparisons' widths for reference; exits 1 where an
A/A interval leaves 0 out.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.io import read_json  # noqa: E402
from lorabench.stats import paired_ratios, ratio_span  # noqa: E402


def aa_pairs(summary: dict) -> list[dict]:
    """Every A/A comparison of a study: two conditions of one server job that name the same adapters in the same
    order, at the same burst size, paired per cycle (stats.ratio_span, as the report's comparisons)."""
    conds = summary.get("conditions") or {}
    rows = [r for r in summary.get("rows") or [] if r.get("status") == "ok"]
    out = []
    for num in rows:
        for den in rows:
            same = conds.get(num["condition"], {}).get("adapters") == conds.get(den["condition"], {}).get("adapters")
            key = (num["server"], num["burst"])
            if not same or key != (den["server"], den["burst"]) or num["condition"] <= den["condition"]:
                continue
            span = ratio_span(num, den)
            if span is None:
                continue
            pct, lo, hi = span
            n = len(paired_ratios(num, den))
            out.append({"server": num["server"], "burst": num["burst"], "condition": num["condition"],
                        "reference": den["condition"], "ratio_pct": pct, "ratio_lo_pct": lo, "ratio_hi_pct": hi,
                        "halfwidth_points": max(pct - lo, hi - pct), "pairs": n})  # fmt: skip
    return out


def report(folder: Path) -> tuple[list[str], bool]:
    summary = read_json(folder / "summary" / "summary.json")  # or summary.json.gz, as studies/ keep it
    aa = aa_pairs(summary)
    lines = [f"{folder}:"]
    ok = True
    if not aa:
        lines.append("  no A/A condition in this study (add one that repeats another's adapters)")
    for c in aa:
        holds = c["ratio_lo_pct"] <= 0 <= c["ratio_hi_pct"]
        ok &= holds
        lines.append(
            f"  A/A {c['server']} {c['condition']} vs {c['reference']} burst {c['burst']}: {c['ratio_pct']:+.1f} % "
            f"[{c['ratio_lo_pct']:+.1f}, {c['ratio_hi_pct']:+.1f}] (±{c['halfwidth_points']:.1f} points, "
            f"{c['pairs']} pairs): {'0 inside' if holds else '0 OUTSIDE'}"
        )
    for server in sorted({c["server"] for c in aa}):
        widths = sorted(
            c["halfwidth_points"]
            for c in summary.get("comparisons") or []
            if c["server"] == server and not any(c["condition"] == x["condition"] for x in aa)
        )
        if widths:
            lines.append(
                f"  {server}: its other comparisons ({len(widths)}) ±{widths[0]:.1f} to ±{widths[-1]:.1f} points"
            )
    return lines, ok


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    all_ok = True
    for arg in argv:
        lines, ok = report(Path(arg))
        all_ok &= ok
        print("\n".join(lines))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
