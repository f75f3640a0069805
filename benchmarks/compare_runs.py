"""Do two runs of the same study agree? For every row, the ratio to the baseline in each run and the span the
two medians' 95 % intervals allow (lorabench.stats.ratio_span, as the report computes it: with fewer than nine
repetitions an interval is the range); two runs agree on a row when the spans overlap. Prints one line per row,
then whether every row agrees, the widest interval of each run and the largest difference between the medians.

usage: .venv/bin/python benchmarks/compare_runs.py RUN1/summary.csv RUN2/summary.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.stats import ratio_span  # noqa: E402


def spans(df: pd.DataFrame) -> pd.DataFrame:
    df = df[df["status"] == "ok"].set_index(["server", "condition", "burst"])
    base = df[df["baseline"].astype(str) != ""]
    b = base["baseline"].iloc[0].split("/")
    ref = df.xs((b[0], b[1]), level=("server", "condition"))
    out = df[["ratio_to_baseline_pct"]].copy()
    out["width"] = df["throughput_ci_pct"] if "throughput_ci_pct" in df else df["throughput_spread_pct"]
    span = [ratio_span(r, ref.loc[k[2]]) for k, r in df.iterrows()]
    out["lo"] = [s[1] if s else float("nan") for s in span]
    out["hi"] = [s[2] if s else float("nan") for s in span]
    return out


def main(a_path: str, b_path: str) -> int:
    a, b = spans(pd.read_csv(a_path)), spans(pd.read_csv(b_path))
    agree_all = True
    print(f"{'server':<10} {'condition':<9} {'burst':>5}  {'run 1 ratio [span]':<24} {'run 2 ratio [span]':<24} agree")
    for k in a.index.intersection(b.index):
        ra, rb = a.loc[k], b.loc[k]
        agree = not (ra.hi < rb.lo or rb.hi < ra.lo)
        agree_all &= agree
        print(
            f"{k[0]:<10} {k[1]:<9} {k[2]:>5}  {ra.ratio_to_baseline_pct:+6.1f}% [{ra.lo:+.1f}, {ra.hi:+.1f}]".ljust(48)
            + f" {rb.ratio_to_baseline_pct:+6.1f}% [{rb.lo:+.1f}, {rb.hi:+.1f}]".ljust(25)
            + f" {'yes' if agree else 'NO'}"
        )
    diff = (a.ratio_to_baseline_pct - b.ratio_to_baseline_pct).abs().max()
    print(
        f"\nevery row agrees: {'yes' if agree_all else 'no'}; widest 95 % interval of a median "
        f"run 1 ±{a.width.max():.1f} %, run 2 ±{b.width.max():.1f} %; "
        f"largest difference of the medians {diff:.1f} points"
    )
    return 0 if agree_all else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
