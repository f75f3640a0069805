"""What moves with throughput between measurements? Re-reads finished server jobs' measurements and prints, per
server, how far measurements of one cell stray from the cell's median, whether that comes from the bursts inside
a measurement or from whole measurements (a slow state that lasts a measurement), how long such states last (the
correlation of one measurement's deviation with the next ones' in run order), and which recorded state moves
with it: the GPU's SM clock, power and busy share (GpuTelemetry), time stolen from the host, the engine's CPU
use and its busiest thread, the load client's own CPU and the CPU probe's time (HostTelemetry); and, where the
busiest thread's CPU was recorded, how far measurements stray on each CPU it ran on and whether the ones where
it changed CPU stray further. No server runs: it is arithmetic on measurements.jsonl.

usage: .venv/bin/python benchmarks/slow_states.py SERVER_DIR/measurements.jsonl [...]
       (a study keeps it as measurements.jsonl.gz: either name reads it)
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.io import read_jsonl  # noqa: E402

FIELDS = (
    "gpu_sm_mhz_mean",
    "gpu_power_w_mean",
    "gpu_util_pct_mean",
    "host_steal_pct",
    "host_busy_cpus",
    "engine_cpus",
    "engine_top_thread_pct",
    "engine_top_thread_preempted_per_s",
    "engine_top_thread_waits_per_s",
    "engine_top_thread_migrations_per_s",
    "engine_top_cpu_steal_pct",
    "client_cpu_pct",
    "client_preempted_per_s",
    "host_cpu_probe_ms",
)


def _corr(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3 or statistics.pstdev(xs) == 0 or statistics.pstdev(ys) == 0:
        return None
    return statistics.correlation(xs, ys)


def _autocorr(xs: list[float], lag: int) -> float:
    mu, var = statistics.fmean(xs), statistics.pvariance(xs)
    n = len(xs)
    return sum((xs[i] - mu) * (xs[i + lag] - mu) for i in range(n - lag)) / n / var if var else 0.0


def report(path: Path) -> list[str]:
    rows = list(read_jsonl(path))
    ms = sorted((r for r in rows if not r.get("warmup") and not r.get("n_errors")), key=lambda r: r["order"])
    if len(ms) < 4:
        return [f"{path}: {len(ms)} measurements, too few"]
    cells: dict[tuple[str, int], list[dict]] = {}
    for r in ms:
        cells.setdefault((r["condition"], r["burst"]), []).append(r)
    med = {k: statistics.median(r["throughput_tok_s"] for r in v) for k, v in cells.items()}
    dev = [math.log(r["throughput_tok_s"] / med[(r["condition"], r["burst"])]) for r in ms]
    within = [
        statistics.stdev(r["burst_tok_s"]) / statistics.fmean(r["burst_tok_s"])
        for r in ms
        if len(r.get("burst_tok_s") or []) >= 3
    ]
    nb = statistics.median(len(r.get("burst_tok_s") or [1]) for r in ms)
    w = statistics.median(within) if within else float("nan")
    out = [
        f"{ms[0]['server']}: {len(ms)} measurements in {len(cells)} cells, {nb:.0f} bursts each (median)",
        f"  measurement vs its cell's median: sd {100 * statistics.pstdev(dev):.1f} %; bursts inside a measurement:"
        f" sd {100 * w:.1f} %, so {100 * w / math.sqrt(nb):.1f} % expected from bursts alone",
        "  deviation vs the next measurements (run order), lag 1/2/3/5: "
        + " ".join(f"{_autocorr(dev, k):+.2f}" for k in (1, 2, 3, 5)),
    ]
    for f in FIELDS:
        pairs = [(d, float(r["metrics"][f])) for d, r in zip(dev, ms, strict=True) if r["metrics"].get(f) is not None]
        if not pairs:
            continue
        # against the cell's own median of the field, so that cells of different sizes are comparable
        by_cell: dict[tuple[str, int], list[float]] = {}
        for r in ms:
            if r["metrics"].get(f) is not None:
                by_cell.setdefault((r["condition"], r["burst"]), []).append(float(r["metrics"][f]))
        fmed = {k: statistics.median(v) for k, v in by_cell.items()}
        xs = [
            float(r["metrics"][f]) - fmed[(r["condition"], r["burst"])] for r in ms if r["metrics"].get(f) is not None
        ]
        vals = [v for _, v in pairs]
        c = _corr([d for d, _ in pairs], xs)
        out.append(
            f"  {f:34s} {min(vals):9.1f} .. {max(vals):9.1f}   corr with throughput "
            + (f"{c:+.2f}" if c is not None else "  - (constant)")
        )
    reasons = sorted({r["metrics"].get("gpu_clock_reasons") for r in ms} - {None})
    if reasons:
        out.append(f"  GPU clock-limit reasons seen: {', '.join(reasons)}")
    out += by_cpu(dev, ms)
    top = sorted({r["metrics"].get("engine_top_thread") for r in ms} - {None})
    if top:
        out.append(f"  engine's busiest thread: {', '.join(top)}")
    return out


def by_cpu(dev: list[float], ms: list[dict]) -> list[str]:
    """Deviation from the cell's median per CPU the busiest engine thread ran on ("3": the same CPU at either
    end of the measurement; "3>7": moved), slowest first: a CPU that is slower than the others, or moves that
    cost, show here."""
    groups: dict[str, list[float]] = {}
    for d, r in zip(dev, ms, strict=True):
        cpu = r["metrics"].get("engine_top_thread_cpu")
        if cpu is not None:
            groups.setdefault("moved" if ">" in str(cpu) else f"cpu {cpu}", []).append(d)
    if not groups:
        return []
    lines = ["  busiest engine thread's CPU: measurements, median deviation from their cell's median"]
    for name, ds in sorted(groups.items(), key=lambda kv: statistics.median(kv[1])):
        lines.append(f"    {name:10s} n={len(ds):3d}  {100 * statistics.median(ds):+6.1f} %")
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit(__doc__)
    for p in argv:
        print("\n".join(report(Path(p))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
