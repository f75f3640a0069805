"""Fewer long measurements or more short ones? Re-reads a finished server job's measurements and prints, per
cell, the 95 % interval of the median as measured (n measurements of T seconds) beside the interval the same
bursts give when each measurement is cut in two halves (2n values of about T/2 seconds, each the median of its
half's bursts). No server runs: it is arithmetic on measurements.jsonl.

The halves of one measurement ran back to back, so they are not independent: slow states that last a whole
measurement land in both halves. The split intervals are therefore optimistic; they say which way a design
with more, shorter measurements (shuffled like the rest) would go, not its exact figures.

usage: .venv/bin/python benchmarks/split_measurements.py SERVER_DIR/measurements.jsonl [...]
       (a study keeps it as measurements.jsonl.gz: either name reads it)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.io import read_jsonl  # noqa: E402
from lorabench.stats import MedianInterval  # noqa: E402


def cells(path: Path) -> dict[tuple[str, str, int], list[dict]]:
    out: dict[tuple[str, str, int], list[dict]] = {}
    for r in read_jsonl(path):
        if not r.get("warmup") and not r.get("n_errors"):
            out.setdefault((r["server"], r["condition"], r["burst"]), []).append(r)
    return out


def halves(rows: list[dict]) -> list[float]:
    vals: list[float] = []
    for r in rows:
        b = r["burst_tok_s"]
        h = len(b) // 2
        vals += [statistics.median(b[:h]), statistics.median(b[h:])] if h else [statistics.median(b)]
    return vals


def main(paths: list[str]) -> int:
    print(f"{'server':<16} {'condition':<9} {'burst':>5}  {'as measured':<22} {'halves':<22} seconds each")
    better = worse = 0
    for p in paths:
        for (server, cond, burst), rows in sorted(cells(Path(p)).items()):
            full = MedianInterval.of([r["throughput_tok_s"] for r in rows])
            half = MedianInterval.of(halves(rows))
            secs = statistics.median(r["burst_s"] for r in rows)
            better += half.halfwidth_pct < full.halfwidth_pct
            worse += half.halfwidth_pct > full.halfwidth_pct
            print(
                f"{server:<16} {cond:<9} {burst:>5}  n={full.n:<3} ±{full.halfwidth_pct:5.1f} %"
                f"{'':<9} n={half.n:<3} ±{half.halfwidth_pct:5.1f} %{'':<9} {secs:.1f} / {secs / 2:.1f}"
            )
    print(f"halves narrower in {better} cells, wider in {worse}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
