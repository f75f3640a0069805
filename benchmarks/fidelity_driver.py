"""Runs inside the engine's Python: alternates our burst client and ``vllm.benchmarks.serve`` in one process.

Started by ``benchmarks/fidelity.py``, which owns the server. Both clients run in the same interpreter, with the
same CPU affinity and the same kind of fresh connection pool per round, so that whatever the machine does to
one it does to the other. Each round runs both, in alternating order (ours first on even rounds), and writes one
JSON line per client to the output file. vLLM's client is called through its own ``add_cli_args`` + ``main``;
its start-up check and warm-up requests are turned off (``--ready-check-timeout-sec 0``, ``--num-warmups 0``)
because the driver warms both clients itself before the first recorded round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import io
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.loadgen.client import CompletionRequest, make_session, run_burst  # noqa: E402
from lorabench.loadtest import measurement_row  # noqa: E402


def vllm_args(cfg: dict) -> argparse.Namespace:
    from vllm.benchmarks.serve import add_cli_args

    p = argparse.ArgumentParser()
    add_cli_args(p)
    return p.parse_args(
        [
            "--backend",
            "vllm",
            "--base-url",
            cfg["base_url"],
            "--endpoint",
            "/v1/completions",
            "--model",
            cfg["served_name"],
            "--tokenizer",
            cfg["tokenizer"],
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            cfg["dataset"],
            "--sharegpt-output-len",
            str(cfg["max_tokens"]),
            "--skip-chat-template",
            "--disable-shuffle",
            "--num-prompts",
            str(cfg["burst"]),
            "--max-concurrency",
            str(cfg["burst"]),
            "--request-rate",
            "inf",
            "--ignore-eos",
            "--temperature",
            "0",
            "--lora-modules",
            *cfg["adapters"],
            "--lora-assignment",
            "round-robin",
            "--disable-tqdm",
            "--num-warmups",
            "0",
            "--ready-check-timeout-sec",
            "0",
        ]
    )


def run_vllm(args: argparse.Namespace, burst: int) -> dict:
    from vllm.benchmarks.serve import main

    with contextlib.redirect_stdout(io.StringIO()):
        r = main(copy.deepcopy(args))
    if r["completed"] != burst:
        raise RuntimeError(f"vLLM's client completed {r['completed']} of {burst} requests")
    return {"throughput": r["output_throughput"], "ttft": r["median_ttft_ms"], "itl": r["median_itl_ms"]}


def run_ours(cfg: dict) -> dict:
    names = cfg["adapters"]
    models = cfg["request_models"]
    reqs = [
        CompletionRequest(f"f{i}", names[i % len(names)], models[i % len(names)], cfg["prompt"], cfg["max_tokens"])
        for i in range(cfg["burst"])
    ]

    async def go():
        async with make_session(cfg["burst"]) as s:
            return await run_burst(s, cfg["base_url"], reqs, 600)

    row = measurement_row(asyncio.run(go()), {})
    if row["n_errors"]:
        raise RuntimeError(f"our client saw errors: {row['errors']}")
    return {"throughput": row["throughput_tok_s"], "ttft": row["ttft_median_ms"], "itl": row["itl_median_ms"]}


def main() -> int:
    cfg = json.loads(sys.argv[1])
    out = Path(cfg["out"])
    vargs = vllm_args(cfg)
    for _ in range(cfg["warmup_rounds"]):
        run_ours(cfg)
        run_vllm(vargs, cfg["burst"])
    t0 = time.monotonic()
    with out.open("w") as f:
        for i in range(cfg["rounds"]):
            order = ("ours", "vllm") if i % 2 == 0 else ("vllm", "ours")
            for who in order:
                res = run_ours(cfg) if who == "ours" else run_vllm(vargs, cfg["burst"])
                f.write(json.dumps({"round": i, "client": who, **res}) + "\n")
                f.flush()
            done = i + 1
            eta = (time.monotonic() - t0) / done * (cfg["rounds"] - done)
            print(f"fidelity: round {done}/{cfg['rounds']} done, about {eta:.0f} s left", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
