"""Would pairing by round narrow the comparisons? Re-reads a finished server job's measurements and prints, for
each adapter mix against the base model on the same server and burst, side by side:

  unpaired  the report's figure: the ratio of the two cells' medians and the span their 95 % intervals allow
            (low end over high end to high end over low end)
  unpaired bootstrap  the same ratio with a 95 % interval from resampling each cell's measurements on its own
            (2,000 resamples, seeded): what the report's span would be as a 95 % interval, to tell how much of
            the paired interval's narrowing is the pairing
  paired    the ratio within each round (the two cells' measurements of the same repetition, taken within one
            shuffled round of the job), its median over rounds and that median's 95 % interval (order
            statistics, as the report's intervals), then the same median's bootstrap interval beside the
            unpaired bootstrap: the fair comparison of pairing against not pairing (a bootstrap of a median
            over 10-14 values runs narrow, for both alike)

A slow state that lasts longer than a round moves both cells of that round alike and cancels in a paired ratio;
one that lasts a single measurement does not. No server runs: it is arithmetic on measurements.jsonl.

usage: .venv/bin/python benchmarks/paired_ratios.py SERVER_DIR/measurements.jsonl [...]
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from lorabench.stats import MedianInterval  # noqa: E402


def cells(path: Path) -> dict[tuple[str, int], dict[int, float]]:
    """Per (condition, burst): throughput by repetition, measurements without errors only."""
    out: dict[tuple[str, int], dict[int, float]] = {}
    for line in path.read_text().splitlines():
        r = json.loads(line) if line.strip() else None
        if r and not r.get("warmup") and not r.get("n_errors"):
            out.setdefault((r["condition"], int(r["burst"])), {})[int(r["rep"])] = float(r["throughput_tok_s"])
    return out


def compare(by_rep: dict[int, float], ref: dict[int, float]) -> dict[str, float]:
    a, b = MedianInterval.of(list(by_rep.values())), MedianInterval.of(list(ref.values()))
    pairs = [by_rep[k] / ref[k] for k in sorted(by_rep.keys() & ref.keys())]
    p = MedianInterval.of(pairs)
    rng = random.Random(0)
    xs, ys = list(by_rep.values()), list(ref.values())
    boot = sorted(
        statistics.median(rng.choices(xs, k=len(xs))) / statistics.median(rng.choices(ys, k=len(ys)))
        for _ in range(2000)
    )
    pboot = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(2000)) if pairs else [1.0] * 2000
    return {
        "pb_lo": 100 * (pboot[49] - 1),
        "pb_hi": 100 * (pboot[1949] - 1),
        "b_lo": 100 * (boot[49] - 1),
        "b_hi": 100 * (boot[1949] - 1),
        "ratio": 100 * (a.median / b.median - 1),
        "lo": 100 * (a.lo / b.hi - 1),
        "hi": 100 * (a.hi / b.lo - 1),
        "pairs": len(pairs),
        "p_ratio": 100 * (p.median - 1),
        "p_lo": 100 * (p.lo - 1),
        "p_hi": 100 * (p.hi - 1),
    }


def report(path: Path) -> list[str]:
    cs = cells(path)
    server = path.parent.name
    lines = [
        f"{server}: mix vs base, same burst   unpaired ratio [span]     unpaired bootstrap   "
        "paired ratio [95 % interval]  paired bootstrap   rounds"
    ]
    widths: list[tuple[float, float, float, float]] = []
    for (cond, burst), by_rep in sorted(cs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ref = cs.get(("base", burst))
        if cond == "base" or not ref:
            continue
        c = compare(by_rep, ref)
        widths.append((c["hi"] - c["lo"], c["b_hi"] - c["b_lo"], c["p_hi"] - c["p_lo"], c["pb_hi"] - c["pb_lo"]))
        lines.append(
            f"  {cond:8s} burst {burst:3d}   {c['ratio']:+6.1f}% [{c['lo']:+6.1f}, {c['hi']:+6.1f}]"
            f"   [{c['b_lo']:+6.1f}, {c['b_hi']:+6.1f}]"
            f"    {c['p_ratio']:+6.1f}% [{c['p_lo']:+6.1f}, {c['p_hi']:+6.1f}]"
            f"    [{c['pb_lo']:+6.1f}, {c['pb_hi']:+6.1f}]   {c['pairs']:3d}"
        )
    if widths:
        u, b, p, pb = (statistics.median(w[i] for w in widths) for i in range(4))
        lines.append(
            f"  median width in points: unpaired span {u:.1f}, paired interval {p:.1f}; bootstrap: unpaired"
            f" {b:.1f}, paired {pb:.1f} ({len(widths)} comparisons)"
        )
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit(__doc__)
    for p in argv:
        print("\n".join(report(Path(p))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
