"""Stability: what each of the harness's mitigations contributes, measured on one server in one run.

One server of a study's config (its model, adapters, engine environment and request set must already be built,
e.g. by `snakemake` for that config), one cell (condition x burst). Every round measures the cell once with each
variant, in a seeded shuffled order; a measurement is what the pipeline measures (bursts repeated until
``--min-s`` seconds of bursts, the median of the bursts' throughputs). Variants switch one mitigation off at a
time against ``all-on`` (the pipeline's defaults), plus ``all-off`` (every mitigation off):

  all-on          garbage collector frozen while measuring, /metrics scraped between bursts, CPUs pinned
  gc-on           the garbage collector left on
  metrics-during  /metrics scraped every --scrape-interval s while requests are in flight
  unpinned        the server's threads and the client free to run on any CPU (set at run time on every thread
                  of the server's process group, restored afterwards)
  smi-during      nvidia-smi run every 0.25 s while requests are in flight (GPU hosts only)
  all-off         all of the above off at once

and two that try more than the pipeline does:

  procs-apart     (GPU hosts) each process of the server's group confined to its own block of the server's CPUs (the
                  busiest process first, by the CPU time it has used so far), so that the engine's scheduler, its
                  HTTP front end and its detokenizer never compete for one CPU (set at run time, restored after)
  long            measurements four times as long (--min-s x 4): whether slow states average out inside one
  thread-fixed    (GPU hosts) the engine's busiest thread (by the CPU time it has used so far: SGLang's scheduler,
                  vLLM's engine core loop) alone on one CPU of the server's, every other thread of the group on the
                  rest, so the kernel cannot move it between CPUs between or during measurements

Prints, per variant: the median measurement figure, its spread over rounds (half the range, in percent of the
median, the source's "±x%"), the 95 % interval of the median, the number of slow bursts (below 75 % of their
measurement's median), and the spread that single bursts (the source's method) would have had.

usage (after `snakemake --cores 1 results/workload/requests.json results/envs/vllm-cpu.json ...`):
  .venv/bin/python benchmarks/stability.py --server lora-2 --condition ab --burst 8 --rounds 8 --json F
on a GPU host:
  python3 benchmarks/stability.py --config config/gpu-h200-both.yaml --server sglang-lora-2 --condition ab \
      --burst 48 --rounds 8 --min-s 3 --json F
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from lorabench.config import detect_hardware, load_file  # noqa: E402
from lorabench.engines import ServerSpec, get_engine  # noqa: E402
from lorabench.harness import GpuPoller  # noqa: E402
from lorabench.io import read_json, setup_job_logging, write_json  # noqa: E402
from lorabench.job import ServerJob, read_inputs_in, server_job  # noqa: E402
from lorabench.loadgen.client import make_session  # noqa: E402
from lorabench.loadtest import Measurer, engine_server, job_cpus, ready_server  # noqa: E402
from lorabench.resources import HostTelemetry, cpu_ticks, group_threads  # noqa: E402
from lorabench.server import terminate_on_signals  # noqa: E402
from lorabench.stats import MedianInterval, Summary, outliers_below  # noqa: E402

ALL_ON = {"gc": "freeze", "metrics": "between", "pin": "auto"}
VARIANTS: dict[str, dict[str, Any]] = {
    "all-on": {},
    "gc-on": {"gc": "on"},
    "metrics-during": {"metrics": "during"},
    "unpinned": {"pin": "off"},
    "smi-during": {"smi": True},
    "all-off": {"gc": "on", "metrics": "during", "pin": "off", "smi": True},
    "procs-apart": {"apart": True},
    "long": {"length": 4.0},
    "thread-fixed": {"fixed": True},
}
DEFAULT_OFF = ("procs-apart", "long", "thread-fixed")  # asked for by name (--variants)


def group_cpus(threads: dict[int, list[int]]) -> set[int]:
    """The CPUs any thread of a server's group (``group_threads``) may run on."""
    allowed: set[int] = set()
    for tids in threads.values():
        for tid in tids:
            with contextlib.suppress(OSError):
                allowed |= os.sched_getaffinity(tid)
    return allowed


def apart_plan(pgid: int) -> dict[int, set[int]]:
    """Per process of the server's group, its own block of the CPUs the group's threads may use: the busiest
    process gets the first block and the remainder; processes beyond the number of CPUs share the last one.
    Meant for a GPU host, where the server has many CPUs (on a CPU-only host the engine's compute threads need
    them all)."""
    threads = group_threads(pgid)
    cpus = sorted(group_cpus(threads))
    procs = sorted(threads, key=lambda pid: cpu_ticks(pid) or 0, reverse=True)
    n = max(1, min(len(procs), len(cpus)))
    size = len(cpus) // n
    blocks = [set(cpus[k * size : (k + 1) * size]) for k in range(n)]
    blocks[0] |= set(cpus[n * size :])
    return {pid: blocks[min(k, n - 1)] for k, pid in enumerate(procs)}


@contextlib.contextmanager
def placed(cpus_of: dict[int, set[int]]) -> Iterator[None]:
    """Each thread id of ``cpus_of`` (0: this process) on its CPUs; every one's layout restored after."""
    saved: dict[int, set[int]] = {}
    for tid, cpus in cpus_of.items():
        with contextlib.suppress(OSError):
            saved[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
    try:
        yield
    finally:
        for tid, cpus in saved.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cpus)


def procs_apart(pgid: int) -> contextlib.AbstractContextManager[None]:
    """Every thread of each server process on that process's block (apart_plan)."""
    plan = apart_plan(pgid)
    return placed({tid: plan[pid] for pid, tids in group_threads(pgid).items() if pid in plan for tid in tids})


def thread_fixed(pgid: int) -> contextlib.AbstractContextManager[None]:
    """The group's busiest thread alone on the last CPU the group may use, the other threads on the rest."""
    threads = group_threads(pgid)
    tids = [(pid, tid) for pid, ts in threads.items() for tid in ts]
    allowed = group_cpus(threads)
    if len(allowed) < 2 or not tids:
        return contextlib.nullcontext()
    top = max(tids, key=lambda pt: cpu_ticks(*pt) or 0)[1]
    own = max(allowed)
    return placed({tid: {own} if tid == top else allowed - {own} for _, tid in tids})


def unpinned(pgid: int) -> contextlib.AbstractContextManager[None]:
    """Every thread of the server's group and this process free to use every CPU."""
    every = set(range(os.cpu_count() or 1))
    return placed({tid: every for tids in group_threads(pgid).values() for tid in tids} | {0: every})


def spread(values: list[float]) -> float:
    return Summary.of(values).spread_pct


def summarize(rows: list[dict[str, Any]], variants: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v in variants:
        sel = [r for r in rows if r["variant"] == v and r["n_errors"] == 0]
        vals = [r["throughput_tok_s"] for r in sel]
        bursts = [b for r in sel for b in r["burst_tok_s"]]
        iv = MedianInterval.of(vals)
        out[v] = {
            "n": len(vals),
            "median_tok_s": iv.median,
            "spread_pct": spread(vals),
            "ci95": [iv.lo, iv.hi],
            "ci_halfwidth_pct": iv.halfwidth_pct,
            "ci_coverage": iv.coverage,
            "bursts": len(bursts),
            "slow_bursts": sum(r["outlier_bursts"] for r in sel),
            "slow_bursts_vs_all": len(outliers_below(bursts, 0.75)),
            "single_burst_spread_pct": spread(bursts),
            "total_def_spread_pct": spread([r["throughput_total_tok_s"] for r in sel]),
            "itl_median_ms": statistics.median(r["itl_median_ms"] for r in sel) if sel else float("nan"),
            "errors": sum(r["n_errors"] for r in rows if r["variant"] == v),
            **{
                f"{k}_median": statistics.median(vs) if vs else None
                for k in (
                    "engine_top_thread_pct",
                    "engine_top_thread_migrations_per_s",
                    "engine_top_cpu_steal_pct",
                    "gpu_util_pct_mean",
                    "host_steal_pct",
                    "client_cpu_pct",
                    "host_cpu_probe_ms",
                )  # fmt: skip
                for vs in [[r["metrics"][k] for r in sel if r.get("metrics", {}).get(k) is not None]]
            },
        }
    return out


def print_table(summary: dict[str, Any], base: str = "all-on") -> None:
    ref = summary.get(base, {}).get("median_tok_s")
    print(
        f"\n{'variant':<15} {'n':>3} {'median tok/s':>13} {'vs all-on':>9} {'spread ±%':>9} {'95% CI ±%':>9} "
        f"{'slow bursts':>11} {'1-burst ±%':>10} {'ITL ms':>7}"
    )
    for v, s in summary.items():
        rel = 100 * (s["median_tok_s"] / ref - 1) if ref else float("nan")
        print(
            f"{v:<15} {s['n']:>3} {s['median_tok_s']:>13,.1f} {rel:>+8.1f}% {s['spread_pct']:>9.1f} "
            f"{s['ci_halfwidth_pct']:>9.1f} {s['slow_bursts']:>5}/{s['bursts']:<5} "
            f"{s['single_burst_spread_pct']:>10.1f} "
            f"{s['itl_median_ms']:>7.2f}"
        )


async def run(args: argparse.Namespace, job: ServerJob, spec: ServerSpec, srv: Any, rset: dict[str, Any]) -> list:
    engine = get_engine(spec.engine)
    variants = [v for v in args.variants.split(",") if v]
    rows: list[dict[str, Any]] = []
    async with make_session(args.burst, srv.api_key) as session:
        m = Measurer(job, engine, spec, srv.base_url, rset, session, host=HostTelemetry(srv.proc.pid))
        base_s = job.min_measurement_s
        for w in range(args.warmup):  # every variant's path once, unmeasured
            await m.bursts(args.condition, args.burst, f"warmup{w}", 0.0, 2, 2, "during")
        rng = random.Random(args.seed)
        for rnd in range(args.rounds):
            order = list(variants)
            rng.shuffle(order)
            for v in order:
                knobs = {**ALL_ON, **VARIANTS[v]}
                job.harness = {k: knobs[k] for k in ALL_ON}
                cell = {"condition": args.condition, "burst": args.burst, "rep": rnd, "order": len(rows)}
                job.min_measurement_s = base_s * knobs.get("length", 1.0)
                with contextlib.ExitStack() as stack:
                    if knobs["pin"] == "off":
                        stack.enter_context(unpinned(srv.proc.pid))
                    if knobs.get("apart"):
                        stack.enter_context(procs_apart(srv.proc.pid))
                    if knobs.get("fixed"):
                        stack.enter_context(thread_fixed(srv.proc.pid))
                    if knobs.get("smi"):
                        stack.enter_context(GpuPoller(0.25))
                    row = await m.measure(cell)
                keys = ("throughput_tok_s", "throughput_total_tok_s", "burst_tok_s", "outlier_bursts", "n_bursts",
                        "n_errors", "itl_median_ms", "ttft_median_ms", "metrics")  # fmt: skip
                row = {k: row[k] for k in keys}
                rows.append({"round": rnd, "variant": v, **row})
                print(
                    f"round {rnd:2d} {v:<15} {row['throughput_tok_s']:10.1f} tok/s  {row['n_bursts']:3d} bursts "
                    f"{row['outlier_bursts']} slow  ITL {row['itl_median_ms']:.2f} ms  top thread "
                    f"{row['metrics'].get('engine_top_thread_pct', float('nan')):.0f} % on cpu "
                    f"{row['metrics'].get('engine_top_thread_cpu', '-')}  probe "
                    f"{row['metrics'].get('host_cpu_probe_ms', float('nan')):.2f} ms",
                    flush=True,
                )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--results", default="results", help="folder holding envs/, model/, adapters/, workload/")
    ap.add_argument("--server", default="lora-2")
    ap.add_argument("--condition", default="ab")
    ap.add_argument("--burst", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--min-s", type=float, default=None, help="seconds of bursts per measurement (default: config)")
    ap.add_argument("--min-bursts", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--scrape-interval", type=float, default=None, help="default: the config's metrics_interval_s")
    ap.add_argument("--variants", default=None, help="comma-separated; default: all that apply here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    config = load_file(args.config)
    hardware = detect_hardware()
    if args.variants is None:
        args.variants = ",".join(
            v for v in VARIANTS if (hardware == "gpu" or not VARIANTS[v].get("smi")) and v not in DEFAULT_OFF
        )
    unknown = sorted(set(args.variants.split(",")) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    results = Path(args.results)
    # The study's job for the server, measuring one cell the way the options say.
    job = dataclasses.replace(
        server_job(config, args.server, hardware, results=str(results)),
        conditions=[args.condition],
        bursts=[args.burst],
        repetitions=1,
        max_repetitions=1,
        bursts_per_measurement=args.min_bursts,
        min_measurement_s=config["min_measurement_s"] if args.min_s is None else args.min_s,
        metrics_interval_s=args.scrape_interval or config["metrics_interval_s"],
        harness=ALL_ON,
    )
    inputs = read_inputs_in(job, config, args.server, results)
    spec = dataclasses.replace(inputs.spec, server_id=f"stability-{args.server}")
    rset = read_json(inputs.request_set)
    setup_job_logging(str(Path("logs") / "stability.log"))
    cpus = job_cpus(job)
    log_path = Path("logs") / f"stability-{args.server}.server.log"
    log_path.unlink(missing_ok=True)
    srv = engine_server(
        get_engine(spec.engine), spec, "127.0.0.1", log_path, Path("logs") / "stability.pid", cpus, None, "stability"
    )
    t0 = time.monotonic()
    with terminate_on_signals(), srv:
        ready, _ = ready_server(srv, cpus, job.readiness_timeout_s)
        print(f"server {args.server} ready after {ready:.1f} s; cpus {cpus.as_dict()}", flush=True)
        rows = asyncio.run(run(args, job, spec, srv, rset))
    variants = args.variants.split(",")
    summary = summarize(rows, variants)
    print(
        f"\n{args.server} {args.condition} burst {args.burst}, {args.rounds} rounds, "
        f"{job.min_measurement_s:g} s of bursts per measurement ({time.monotonic() - t0:.0f} s in all)"
    )
    print_table(summary)
    if args.json:
        write_json(
            args.json,
            {"args": {k: str(v) for k, v in vars(args).items()}, "cpus": cpus.as_dict(), "hardware": hardware,
             "summary": summary, "rows": rows},
        )  # fmt: skip


if __name__ == "__main__":
    main()
