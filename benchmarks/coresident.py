"""Co-resident servers: can two server configurations that are up together be compared paired per cycle?

Method v2 pairs the bursts of one server's cycle; two servers measured one after the other cannot be paired, so
what enabling LoRA costs (LoRA off vs LoRA on) is unpaired, and a slow spell of the host during one job moves it
(studies/cpu-default/v2-run6). This starts several servers of a study's config at once (each with its own port
and log, the study's CPU plan for all of them) and runs cycles of one burst per (server, condition) cell in
rotating order, non-streamed, then prints the per-cycle paired ratios of chosen pairs of cells with the 95 %
interval of their median. An A/A pair (the same configuration twice, e.g. ``lora-off lora-off``) must give 0
within its interval before co-resident figures can be trusted; ``--solo`` then measures the first server's cells
alone, after the others stopped, for the "matches a solo server" side.

    python benchmarks/coresident.py RESULTS CONFIG --servers lora-off lora-off lora-2 \
        --cells 0:base 1:base 2:base 2:a --pairs 1:base/0:base 2:base/0:base 2:a/2:base --burst 4 --cycles 30

RESULTS is a study's results folder with the model, adapters, request set and engine record built (Snakemake
targets results/model/manifest.json results/adapters/*.json results/envs/ENGINE.json results/workload/requests.json).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench import device  # noqa: E402
from lorabench.config import load_file  # noqa: E402
from lorabench.engines import all_server_markers, get_engine  # noqa: E402
from lorabench.job import read_inputs_in, server_job  # noqa: E402
from lorabench.loadgen.client import make_session  # noqa: E402
from lorabench.measure.burst import _burst_figures  # noqa: E402
from lorabench.measure.cycles import Cell  # noqa: E402
from lorabench.measure.measurer import requests_for, send  # noqa: E402
from lorabench.measure.paired import PairedRatio  # noqa: E402
from lorabench.median import MedianInterval  # noqa: E402
from lorabench.server import study_api_key  # noqa: E402
from lorabench.session import engine_server, job_cpus, read_request_set, ready_server  # noqa: E402


def throughput(recs: list) -> float:
    return _burst_figures(recs)[2]


async def cycles(servers: list, cells: list[tuple[int, str]], burst: int, n: int, key: str) -> list[dict]:
    rows: list[dict] = []
    async with make_session(burst, key) as http:
        order = list(cells)
        for c in range(-1, n):  # cycle -1: warm-up, one burst of every cell
            for pos, (i, cond) in enumerate(order):
                srv, job, engine, spec, rset = servers[i]
                reqs = requests_for(engine, spec, rset, Cell(cond, burst, False), f"c{c}")
                recs = await send(http, srv.base_url, reqs, job)
                bad = [r for r in recs if not r.ok]
                if bad:
                    raise SystemExit(f"server {i} ({spec.server_id}) {cond}: {len(bad)} failed: {bad[0].error}")
                if c >= 0:
                    rows.append({"cycle": c, "pos": pos, "cell": f"{i}:{cond}", "tok_s": throughput(recs)})
            order = order[1:] + order[:1]
            if c >= 0 and c % 5 == 4:
                print(f"cycle {c + 1} of {n} {time.strftime('%T')}", flush=True)
    return rows


def paired(rows: list[dict], num: str, den: str) -> tuple[float, float, float, int]:
    """num/den paired per cycle, as the pipeline pairs a server's cells (``measure.paired.PairedRatio``), in %."""

    def by_cycle(cell: str) -> dict[tuple[int, int], float]:
        return {(0, r["cycle"]): r["tok_s"] for r in rows if r["cell"] == cell}

    p = PairedRatio.of_pairs(by_cycle(num), by_cycle(den))
    return p.pct, 100 * (p.lo - 1), 100 * (p.hi - 1), p.n


def cell_median(rows: list[dict], cell: str) -> tuple[float, float, float, int]:
    v = [r["tok_s"] for r in rows if r["cell"] == cell]
    mi = MedianInterval.of(v)
    return mi.median, mi.lo, mi.hi, mi.n


def report(rows: list[dict], cells: list[tuple[int, str]], pairs: list[tuple[str, str]], title: str) -> None:
    print(f"\n## {title}")
    for i, cond in cells:
        m, lo, hi, k = cell_median(rows, f"{i}:{cond}")
        print(f"cell {i}:{cond:8s} {m:8.1f} tok/s [{lo:.1f}, {hi:.1f}] ±{50 * (hi - lo) / m:.1f} %  n={k}")
    for num, den in pairs:
        m, lo, hi, k = paired(rows, num, den)
        print(f"pair {num}/{den}: {m:+.1f} % [{lo:+.1f}, {hi:+.1f}] ±{(hi - lo) / 2:.1f} points  n={k}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("config")
    ap.add_argument("--servers", nargs="+", required=True, help="server ids of the config, repeats allowed")
    ap.add_argument("--cells", nargs="+", required=True, help="INDEX:CONDITION, INDEX into --servers")
    ap.add_argument("--pairs", nargs="*", default=[], help="NUM/DEN cells, e.g. 1:base/0:base")
    ap.add_argument("--burst", type=int, default=4)
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--solo", action="store_true", help="then the first server's cells alone, same cycles")
    ap.add_argument("--out", type=Path, help="raw rows (JSON)")
    args = ap.parse_args()
    config = load_file(args.config)
    cells = [(int(c.split(":")[0]), c.split(":")[1]) for c in args.cells]
    pairs = [tuple(p.split("/")) for p in args.pairs]
    key = study_api_key(args.results)
    jobs = [server_job(config, s, "cpu", results=str(args.results)) for s in args.servers]  # CPU only: no memory split
    cpus = job_cpus(jobs[0])
    out: dict = {"servers": args.servers, "burst": args.burst, "started": time.strftime("%FT%T")}
    with contextlib.ExitStack() as stack:
        lease = stack.enter_context(device.acquire("cpu", all_server_markers(), "coresident"))
        servers = []
        for i, (s, job) in enumerate(zip(args.servers, jobs, strict=True)):
            inputs = read_inputs_in(job, config, s, args.results)
            engine = get_engine(inputs.spec.engine)
            log = Path(f"/tmp/coresident-{i}.log")
            srv = engine_server(engine, inputs.spec, "127.0.0.1", log, None, cpus, lease, key)
            stack.enter_context(srv)  # started
            servers.append((srv, job, engine, inputs.spec, read_request_set(job, inputs)))
        t0 = time.monotonic()
        ready = [ready_server(s[0], cpus, 900)[0] for s in servers]
        print(f"ready after {time.monotonic() - t0:.1f} s (each: {', '.join(f'{r:.1f}' for r in ready)})", flush=True)
        t1 = time.monotonic()
        rows = asyncio.run(cycles(servers, cells, args.burst, args.cycles, key))
        out["coresident"] = rows
        out["coresident_s"] = time.monotonic() - t1
        report(rows, cells, pairs, f"co-resident, {args.cycles} cycles, {out['coresident_s']:.0f} s")
        if args.solo:
            for srv, *_ in servers[1:]:
                srv.stop()
            mine = [c for c in cells if c[0] == 0]
            rows = asyncio.run(cycles(servers, mine, args.burst, args.cycles, key))
            out["solo"] = rows
            own = [p for p in pairs if p[0].startswith("0:") and p[1].startswith("0:")]
            report(rows, mine, own, f"server 0 alone, {args.cycles} cycles")
    if args.out:
        args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
