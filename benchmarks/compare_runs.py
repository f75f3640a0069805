"""Do two runs of the same study agree? For every row, the ratio to the baseline in each run and the span the
two medians' 95 % intervals allow (lorabench.stats.ratio_span, as the report computes it: with fewer than nine
repetitions an interval is the range); two runs agree on a row when the spans overlap. Prints one line per row,
then whether every row agrees, the widest interval of each run and the largest difference between the medians.
Where a summary.json (or a comparisons.json holding its ``comparisons``) lies beside each summary.csv (method v2),
the comparisons within each server, paired per cycle, are compared the same way.

usage: .venv/bin/python benchmarks/compare_runs.py RUN1/summary.csv RUN2/summary.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.io import has_json, read_json  # noqa: E402
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
    paired_ok = paired(_comparisons_file(Path(a_path)), _comparisons_file(Path(b_path)))
    return 0 if agree_all and paired_ok else 1


def _comparisons_file(summary_csv: Path) -> Path:
    full = summary_csv.with_name("summary.json")  # or summary.json.gz, as published studies keep it
    return full if has_json(full) else summary_csv.with_name("comparisons.json")


def paired(a_json: Path, b_json: Path) -> bool:
    """The comparisons within each server of two runs (summary.json ``comparisons``): agree where spans overlap."""
    if not (has_json(a_json) and has_json(b_json)):
        return True
    key = lambda c: (c["server"], c["condition"], c["reference"], c["burst"])  # noqa: E731
    a = {key(c): c for c in read_json(a_json).get("comparisons") or []}
    b = {key(c): c for c in read_json(b_json).get("comparisons") or []}
    common = sorted(set(a) & set(b))
    if not common:
        return True
    print(f"\nwithin each server, paired per cycle:\n{'server':<10} {'comparison':<18} {'burst':>5}  "
          f"{'run 1 [interval]':<24} {'run 2 [interval]':<24} agree")  # fmt: skip
    ok, diffs = True, []
    for k in common:
        x, y = a[k], b[k]
        agree = not (x["ratio_hi_pct"] < y["ratio_lo_pct"] or y["ratio_hi_pct"] < x["ratio_lo_pct"])
        ok &= agree
        diffs.append(abs(x["ratio_pct"] - y["ratio_pct"]))
        print(
            f"{k[0]:<10} {k[1] + ' vs ' + k[2]:<18} {k[3]:>5}  "
            f"{x['ratio_pct']:+6.1f}% [{x['ratio_lo_pct']:+.1f}, {x['ratio_hi_pct']:+.1f}]".ljust(55)
            + f" {y['ratio_pct']:+6.1f}% [{y['ratio_lo_pct']:+.1f}, {y['ratio_hi_pct']:+.1f}]".ljust(25)
            + f" {'yes' if agree else 'NO'}"
        )
    widths = [max(c["halfwidth_points"] for c in run.values()) for run in (a, b)]
    print(f"\nevery paired comparison agrees: {'yes' if ok else 'no'}; widest run 1 ±{widths[0]:.1f}, run 2 "
          f"±{widths[1]:.1f} points; largest difference of the medians {max(diffs):.1f} points")  # fmt: skip
    return ok


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
