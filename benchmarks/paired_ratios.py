"""Does pairing narrow the comparisons? Re-reads a finished server job's measurements and prints, for each
adapter mix against the base model on the same server and burst, side by side:

  unpaired span       the ratio of the two cells' medians and the span their 95 % intervals allow (low end over
                      high end to high end over low end): what the report showed before pairing
  unpaired bootstrap  the same ratio with a 95 % interval from resampling each cell's measurements on its own
                      (2,000 resamples, seeded)
  paired              what the report shows now (stats.ratio_span): each measurement of the mix paired with the
                      nearest in the job's order of the base model on the same server start, the median of the
                      pairs' ratios and its 95 % interval (order statistics)
  paired bootstrap    that median's bootstrap interval: the fair comparison with the unpaired bootstrap (a
                      bootstrap of a median over 10-14 values runs narrow, for both alike)

Then a check of the paired interval where there is no difference (A/A): each cell's measurements split into
two interleaved halves (alternately, in the job's order), the halves compared as two cells; at 95 %, about one
in twenty intervals should leave out 0.

A slow spell of the host that outlasts the gap between two paired measurements slows both and cancels in their
ratio; one that lasts a single measurement does not. No server runs: it is arithmetic on measurements.jsonl.

usage: .venv/bin/python benchmarks/paired_ratios.py SERVER_DIR/measurements.jsonl [...]
       (a study keeps it as measurements.jsonl.gz: either name reads it)
"""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from lorabench.io import read_jsonl  # noqa: E402
from lorabench.stats import MedianInterval, by_time, paired_ratios  # noqa: E402


def cells(path: Path) -> dict[tuple[str, int], list[tuple[int, int, float]]]:
    """Per (condition, burst): (server start, order, throughput) of each measurement without errors."""
    out: dict[tuple[str, int], list[tuple[int, int, float]]] = {}
    for r in read_jsonl(path):
        if r and not r.get("warmup") and not r.get("n_errors"):
            point = (int(r.get("server_start") or 0), int(r["order"]), float(r["throughput_tok_s"]))
            out.setdefault((r["condition"], int(r["burst"])), []).append(point)
    return out


def compare(num: list[tuple[int, int, float]], den: list[tuple[int, int, float]]) -> dict[str, float]:
    xs, ys = [v for *_, v in num], [v for *_, v in den]
    a, b = MedianInterval.of(xs), MedianInterval.of(ys)
    pairs = paired_ratios(
        {"server": "s", "throughput_by_time": by_time(num)}, {"server": "s", "throughput_by_time": by_time(den)}
    )
    p = MedianInterval.of(pairs)
    rng = random.Random(0)
    boot = sorted(
        statistics.median(rng.choices(xs, k=len(xs))) / statistics.median(rng.choices(ys, k=len(ys)))
        for _ in range(2000)
    )
    pboot = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(2000)) if pairs else [1.0] * 2000
    return {
        "ratio": 100 * (a.median / b.median - 1),
        "lo": 100 * (a.lo / b.hi - 1),
        "hi": 100 * (a.hi / b.lo - 1),
        "b_lo": 100 * (boot[49] - 1),
        "b_hi": 100 * (boot[1949] - 1),
        "pairs": len(pairs),
        "p_ratio": 100 * (p.median - 1),
        "p_lo": 100 * (p.lo - 1),
        "p_hi": 100 * (p.hi - 1),
        "pb_lo": 100 * (pboot[49] - 1),
        "pb_hi": 100 * (pboot[1949] - 1),
    }


def report(path: Path) -> list[str]:
    cs = cells(path)
    server = path.parent.name
    lines = [
        f"{server}: mix vs base, same burst   unpaired ratio [span]     unpaired bootstrap   "
        "paired ratio [95 % interval]  paired bootstrap   pairs"
    ]
    widths: list[tuple[float, float, float, float]] = []
    for (cond, burst), points in sorted(cs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ref = cs.get(("base", burst))
        if cond == "base" or not ref:
            continue
        c = compare(points, ref)
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
    aa = [aa_excludes_zero(points) for points in cs.values()]
    aa = [x for x in aa if x is not None]
    if aa:
        lines.append(f"  A/A (interleaved halves of one cell): {sum(aa)} of {len(aa)} paired intervals leave out 0")
    return lines


def aa_excludes_zero(points: list[tuple[int, int, float]]) -> bool | None:
    """Whether the paired interval of two interleaved halves of one cell leaves out 0 (None: too few pairs)."""
    pts = sorted(points)
    x, y = pts[0::2], pts[1::2]
    pairs = paired_ratios(
        {"server": "s", "throughput_by_time": by_time(x)}, {"server": "s", "throughput_by_time": by_time(y)}
    )
    if not pairs:
        return None
    iv = MedianInterval.of(pairs)
    return iv.lo > 1 or iv.hi < 1


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit(__doc__)
    for p in argv:
        print("\n".join(report(Path(p))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
