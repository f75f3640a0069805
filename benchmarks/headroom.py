"""Headroom: how many streamed tokens per second our client ingests on one core.

A local fake server (tests/support/fake_server.py: test support, not part of the product package; in its own
process on the other core) streams OpenAI-style completion events as fast as it can; the client, pinned to one
core, runs bursts against it and counts every event's arrival time exactly as in a measurement. Target: at least
100,000 tokens/s, so the client never limits a GPU measurement. With --profile it prints where the client spends
its time.

usage: .venv/bin/python benchmarks/headroom.py [--burst 64] [--tokens 2048] [--rounds 5] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
sys.path.insert(0, str(ROOT))  # for tests.support: the fake server lives with the tests, outside the package

from lorabench.loadgen.client import CompletionRequest, make_session, run_burst  # noqa: E402
from tests.support.fake_server import start_in_process  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--burst", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per request")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--server-batch", type=int, default=16, help="events the server writes per socket write")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    proc, port = start_in_process(batch=args.server_batch)
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(proc.pid, {cpus[1]})
        os.sched_setaffinity(0, {cpus[0]})
    url = f"http://127.0.0.1:{port}"
    reqs = [CompletionRequest(f"h{i}", "a", "m", "x", args.tokens) for i in range(args.burst)]

    async def burst():
        async with make_session(args.burst) as s:
            t0, c0 = time.perf_counter(), time.process_time()
            recs = await run_burst(s, url, reqs, 600)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert all(r.ok for r in recs), {r.error for r in recs}
        tokens = sum(r.completion_tokens for r in recs)
        return tokens / dt, tokens / cpu, cpu / dt

    asyncio.run(burst())  # warm
    rates, per_cpu = [], []
    prof = cProfile.Profile() if args.profile else None
    for i in range(args.rounds):
        if prof:
            prof.enable()
        tok_s, tok_cpu_s, busy = asyncio.run(burst())
        if prof:
            prof.disable()
        rates.append(tok_s)
        per_cpu.append(tok_cpu_s)
        print(
            f"round {i}: {tok_s:,.0f} tokens/s wall, {tok_cpu_s:,.0f} tokens per client CPU-second "
            f"(client core {100 * busy:.0f}% busy)",
            flush=True,
        )
    proc.kill()
    med, med_cpu = statistics.median(rates), statistics.median(per_cpu)
    print(
        f"\nclient on one core: median {med:,.0f} tokens/s wall, {med_cpu:,.0f} tokens per client CPU-second "
        f"over {args.rounds} rounds (burst {args.burst} x {args.tokens} tokens, one token per event, server writes "
        f"{args.server_batch} events per write); target 100,000 tokens/s: "
        f"{'met' if med >= 100_000 else 'NOT met'} ({med / 100_000:.2f}x wall)"
    )
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
