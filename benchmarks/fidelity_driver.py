"""Runs inside the engine's Python: alternates our burst client and ``vllm.benchmarks.serve`` in one process.

Started by ``benchmarks/fidelity.py``, which owns the server. Both clients run in the same interpreter, with the
same CPU affinity and the same kind of fresh connection pool per round, so that whatever the machine does to
one it does to the other. Each round runs each client's own burst, in alternating order, then one shared burst
whose requests alternate between our request function and vLLM's (both time requests of the same burst), and
writes one JSON line per result to the output file. vLLM's client is called through its own ``add_cli_args`` +
``main``; its start-up check and warm-up requests are turned off (``--ready-check-timeout-sec 0``,
``--num-warmups 0``) because the driver warms every variant itself before the first recorded round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import io
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.loadgen.client import CompletionRequest, make_session, run_burst, send_request  # noqa: E402
from lorabench.measure.burst import measurement_row  # noqa: E402


def vllm_args(cfg: dict) -> argparse.Namespace:
    from vllm.benchmarks.serve import add_cli_args

    p = argparse.ArgumentParser()
    add_cli_args(p)
    args = p.parse_args(
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
    args.save_detailed = True  # keeps per-request start times in the returned result (nothing is saved)
    return args


def run_vllm(args: argparse.Namespace, burst: int) -> dict:
    from vllm.benchmarks.serve import main

    with contextlib.redirect_stdout(io.StringIO()):
        r = main(copy.deepcopy(args))
    if r["completed"] != burst:
        raise RuntimeError(f"vLLM's client completed {r['completed']} of {burst} requests")
    starts = r["start_times"]
    return {
        "throughput": r["output_throughput"],
        "ttft": r["median_ttft_ms"],
        "itl": r["median_itl_ms"],
        "send_spread_ms": 1000 * (max(starts) - min(starts)),
    }


def run_vllm_without_metrics(args: argparse.Namespace, burst: int) -> dict:
    """vLLM's client with its two GET /metrics calls before and after the burst turned into no-ops."""
    import vllm.benchmarks.serve as serve

    async def nothing(*_a: object, **_k: object) -> None:
        return None

    saved = serve.fetch_spec_decode_metrics, serve.fetch_diffusion_metrics
    serve.fetch_spec_decode_metrics = serve.fetch_diffusion_metrics = nothing
    try:
        return run_vllm(args, burst)
    finally:
        serve.fetch_spec_decode_metrics, serve.fetch_diffusion_metrics = saved


def run_vllm_without_trust_env(args: argparse.Namespace, burst: int) -> dict:
    """vLLM's client with its session's ``trust_env`` off. With it on, aiohttp looks up ~/.netrc and the proxy
    settings for every request in the default thread pool (two executor hops per request, after the request's
    timer has started), which the client's TTFT then includes."""
    import aiohttp
    import vllm.benchmarks.serve as serve

    real = aiohttp.ClientSession

    class Session(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a: object, **k: object) -> None:
            k["trust_env"] = False
            super().__init__(*a, **k)

    serve.aiohttp.ClientSession = Session
    try:
        return run_vllm(args, burst)
    finally:
        serve.aiohttp.ClientSession = real


def _requests(cfg: dict) -> list[CompletionRequest]:
    names, models = cfg["adapters"], cfg["request_models"]
    return [
        CompletionRequest(f"f{i}", names[i % len(names)], models[i % len(names)], cfg["prompt"], cfg["max_tokens"])
        for i in range(cfg["burst"])
    ]


def run_ours(cfg: dict, metrics_first: bool = False) -> dict:
    reqs = _requests(cfg)

    async def go() -> list:
        async with make_session(cfg["burst"]) as s:
            if metrics_first:  # what vLLM's client does just before its burst
                for _ in range(2):
                    async with s.get(cfg["base_url"] + "/metrics") as r:
                        await r.read()
            return await run_burst(s, cfg["base_url"], reqs, 600)

    records = asyncio.run(go())
    row = measurement_row(records, {})
    if row["n_errors"]:
        raise RuntimeError(f"our client saw errors: {row['errors']}")
    starts = [r.start_s for r in records]
    return {
        "throughput": row["throughput_tok_s"],
        "ttft": row["ttft_median_ms"],
        "itl": row["itl_median_ms"],
        "send_spread_ms": 1000 * (max(starts) - min(starts)),
    }


def run_shared(cfg: dict, trust_env: bool = True) -> tuple[dict, dict]:
    """One burst whose requests alternate between our request function and vLLM's, each with its own connection
    pool, all sent in one gather: both clients time requests of the same burst on the same server state.
    ``trust_env=False`` gives vLLM's side a session without the per-request netrc/proxy lookups."""
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput, async_request_openai_completions

    reqs = _requests(cfg)
    n = cfg["burst"]

    async def go() -> tuple[list, list]:
        ours_s = make_session(n)
        # vLLM's own session settings (benchmark() in vllm/benchmarks/serve.py)
        conn = aiohttp.TCPConnector(limit=n, limit_per_host=n, ttl_dns_cache=300, keepalive_timeout=60)
        theirs_s = aiohttp.ClientSession(connector=conn, trust_env=trust_env, timeout=aiohttp.ClientTimeout(total=600))
        try:
            coros = []
            for i, r in enumerate(reqs):
                if i % 2 == 0:
                    coros.append(send_request(ours_s, cfg["base_url"], r, 600))
                else:
                    inp = RequestFuncInput(
                        prompt=r.prompt,
                        api_url=cfg["base_url"] + "/v1/completions",
                        prompt_len=0,
                        output_len=r.max_tokens,
                        model=r.model,
                        model_name=r.model,
                        ignore_eos=True,
                        extra_body={"temperature": 0.0},
                    )
                    coros.append(async_request_openai_completions(inp, theirs_s))
            out = await asyncio.gather(*coros)
        finally:
            await ours_s.close()
            await theirs_s.close()
        return out[0::2], out[1::2]

    mine, theirs = asyncio.run(go())
    row = measurement_row(mine, {})
    if row["n_errors"] or any(not o.success for o in theirs):
        raise RuntimeError("errors in the shared burst")
    return (
        {"ttft": row["ttft_median_ms"], "itl": row["itl_median_ms"]},
        {
            "ttft": 1000 * statistics.median(o.ttft for o in theirs),
            "itl": 1000 * statistics.median(x for o in theirs for x in o.itl),
        },
    )


def main() -> int:
    cfg = json.loads(sys.argv[1])
    out = Path(cfg["out"])
    vargs = vllm_args(cfg)
    steps = {"ours": lambda: run_ours(cfg), "vllm": lambda: run_vllm(vargs, cfg["burst"])}
    diagnose = cfg.get("diagnose") or []
    if "metrics" in diagnose:
        steps["ours+metrics"] = lambda: run_ours(cfg, metrics_first=True)
        steps["vllm-no-metrics"] = lambda: run_vllm_without_metrics(vargs, cfg["burst"])
    shared = {"shared": lambda: run_shared(cfg)}
    if "trust-env" in diagnose:
        steps["vllm-no-trust-env"] = lambda: run_vllm_without_trust_env(vargs, cfg["burst"])
        shared = {"shared-no-trust-env": lambda: run_shared(cfg, trust_env=False), **shared}
    for _ in range(cfg["warmup_rounds"]):
        for step in (*steps.values(), *shared.values()):
            step()
    t0 = time.monotonic()
    with out.open("w") as f:
        for i in range(cfg["rounds"]):
            order = list(steps) if i % 2 == 0 else list(reversed(steps))
            for who in order:
                f.write(json.dumps({"round": i, "client": who, **steps[who]()}) + "\n")
            for name, burst in shared.items():  # "shared" last: its "shared:vllm" line marks a complete round
                mine, theirs = burst()
                f.write(json.dumps({"round": i, "client": f"{name}:ours", **mine}) + "\n")
                f.write(json.dumps({"round": i, "client": f"{name}:vllm", **theirs}) + "\n")
            f.flush()
            done = i + 1
            eta = (time.monotonic() - t0) / done * (cfg["rounds"] - done)
            print(f"fidelity: round {done}/{cfg['rounds']} done, about {eta:.0f} s left", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
