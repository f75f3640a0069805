"""What pairing across servers buys: for a co-resident group's records, each cross-server comparison's paired
interval (the median of the per-cycle ratios, as summary.server_comparisons computes it) beside the unpaired span
of the same bursts (the ratio of the two medians, with the span their 95 % intervals allow, as a comparison of two
servers measured one after the other is read), side by side.

    python benchmarks/group_pairing.py results/groups/GROUP [results/groups/OTHER ...]
    python benchmarks/group_pairing.py results            (every group under results/groups/)

Throughput from the non-streamed bursts (streamed ones where a cell has no other), every member against each member
started before it, at the same condition and burst size. Both intervals come from the product's code
(``stats.ratio_span``), on the same rows: only the pairing differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.io import read_json, read_jsonl  # noqa: E402
from lorabench.median import MedianInterval  # noqa: E402
from lorabench.stats import by_time, paired_ratios, ratio_span  # noqa: E402


def cell_rows(folder: Path, group: str, server: str) -> dict[tuple[str, int], dict[str, Any]]:
    """A member's cells as summary rows hold them: throughput by cycle, median and its 95 % interval."""
    bursts = [r for r in read_jsonl(folder / "servers" / server / "measurements.jsonl") if not r.get("warmup")]
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for cond, burst in sorted({(r["condition"], int(r["burst"])) for r in bursts}):
        mine = [r for r in bursts if r["condition"] == cond and int(r["burst"]) == burst]
        tp = [r for r in mine if not r["stream"]] or mine
        points = [(int(r.get("server_start") or 0), int(r["cycle"]), float(r["throughput_tok_s"])) for r in tp]
        iv = MedianInterval.of([v for *_, v in points])
        out[(cond, burst)] = {"server": server, "group": group, "condition": cond, "burst": burst,
                              "throughput_by_cycle": by_time(points), "throughput_median": iv.median,
                              "throughput_ci_lo": iv.lo, "throughput_ci_hi": iv.hi}  # fmt: skip
    return out


def compare(folder: Path) -> list[str]:
    info = read_json(folder / "group.json")
    group, members = info["group"], list(info["servers"])
    if info.get("status") != "ok":
        return [f"{group}: {info.get('status')}"]
    cells = {s: cell_rows(folder, group, s) for s in members}
    head = f"{'comparison':44s} {'paired':>28s} {'±pts':>6s}   {'unpaired':>28s} {'±pts':>6s}  width ratio"
    lines = [f"## group {group}: {', '.join(members)}; {info['cycles']} cycles", head]
    for i, server in enumerate(members):
        for ref in members[:i]:
            for key, num in sorted(cells[server].items()):
                den = cells[ref].get(key)
                if den is None:
                    continue
                paired = ratio_span(num, den) if paired_ratios(num, den) else None
                alone = ratio_span({**num, "group": None}, {**den, "group": None})
                if alone is None:
                    continue
                name = f"{server}/{key[0]}/{key[1]} vs {ref}"

                def fmt(span: tuple[float, float, float] | None) -> tuple[str, float]:
                    if span is None:
                        return "too few pairs", float("nan")
                    m, lo, hi = span
                    return f"{m:+.1f} % [{lo:+.1f}, {hi:+.1f}]", max(m - lo, hi - m)

                p, pw = fmt(paired)
                u, uw = fmt(alone)
                ratio = f"{pw / uw:.2f}" if uw and pw == pw else "-"
                lines.append(f"{name:44s} {p:>28s} {pw:6.1f}   {u:>28s} {uw:6.1f}  {ratio:>6s}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="results/groups/GROUP folders, or a results folder")
    args = ap.parse_args()
    folders = []
    for f in args.folders:
        folders += [f] if (f / "group.json").exists() else sorted(p.parent for p in f.glob("groups/*/group.json"))
    if not folders:
        raise SystemExit("no group.json found under " + ", ".join(map(str, args.folders)))
    for f in folders:
        print("\n".join(compare(f)))


if __name__ == "__main__":
    main()
