"""Fidelity: our burst client against vLLM's own load client (``vllm.benchmarks.serve``) on the same server.

One vLLM server of a study's config (its model, adapters and engine environment must already be built, e.g. by
the default study), one workload: the study's prompt, ``--burst`` requests of ``--max-tokens`` tokens sent at
once, adapters a/b round-robin, ignore_eos, temperature 0. Both clients run alternately inside one process of the
engine's Python (``fidelity_driver.py``), so they share CPU placement and start from the same state; the order
flips every round. Prints every round, then per figure (output throughput, TTFT median, ITL median) the median
over rounds of each client, their ratio with a bootstrap 95 % interval (rounds resampled, seed fixed), and the
median of the per-round ratios. Targets: throughput within 3 %, TTFT and ITL medians within 5 %.

usage (after the default study has built the model, adapters and engine env):
  .venv/bin/python benchmarks/fidelity.py [--rounds 40] [--burst 8] [--max-tokens 64]
on the H200, after the GPU config's model/adapters/env jobs:
  python3 benchmarks/fidelity.py --config config/gpu-h200.yaml --server vllm-lora-2 --burst 48 --max-tokens 256
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from lorabench.config import load_file, server_adapters  # noqa: E402
from lorabench.engines import ServerSpec, get_engine  # noqa: E402
from lorabench.io import read_json, setup_job_logging, write_json  # noqa: E402
from lorabench.loadtest import engine_server  # noqa: E402

TARGETS = (("throughput", 3.0), ("ttft", 5.0), ("itl", 5.0))


def server_spec(config: dict, server: str, results: Path) -> tuple[ServerSpec, dict]:
    srv = config["servers"][server]
    eng = config["engines"][srv["engine"]]
    if eng["kind"] != "vllm" or not srv["lora"]:
        raise SystemExit(f"--server {server}: fidelity needs a vLLM server with LoRA on")
    env_info = read_json(results / "envs" / f"{srv['engine']}.json")
    model = read_json(results / "model" / "manifest.json")
    names = server_adapters(config, server)[:2]
    adapters = {n: read_json(results / "adapters" / f"{n}.json")["path"] for n in names}
    spec = ServerSpec(
        server_id=f"fidelity-{server}",
        engine="vllm",
        python=env_info["python"],
        env={**env_info.get("env", {}), **eng.get("env", {}), **srv.get("env", {})},
        model_path=model["path"],
        served_name=model["name"],
        lora=True,
        adapters=adapters,
        max_loras=srv.get("max_loras"),
        max_cpu_loras=srv.get("max_cpu_loras"),
        max_lora_rank=srv.get("max_lora_rank"),
        args=srv.get("args", {}),
    )
    return spec, model


def bootstrap_ratio(a: list[float], b: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of median(a) / median(b), resampling whole rounds (pairs) with replacement."""
    rng = random.Random(seed)
    pairs = list(zip(a, b, strict=True))
    ratios = []
    for _ in range(n):
        s = [rng.choice(pairs) for _ in pairs]
        ratios.append(statistics.median(x for x, _ in s) / statistics.median(y for _, y in s))
    ratios.sort()
    return ratios[int(0.025 * n)], ratios[int(0.975 * n) - 1]


def summarize(rows: list[dict]) -> dict:
    ours = {r["round"]: r for r in rows if r["client"] == "ours"}
    theirs = {r["round"]: r for r in rows if r["client"] == "vllm"}
    rounds = sorted(set(ours) & set(theirs))
    out = {"rounds": len(rounds), "figures": {}}
    for key, target in TARGETS:
        a = [ours[i][key] for i in rounds]
        b = [theirs[i][key] for i in rounds]
        ma, mb = statistics.median(a), statistics.median(b)
        lo, hi = bootstrap_ratio(a, b)
        paired = statistics.median(x / y for x, y in zip(a, b, strict=True))
        out["figures"][key] = {
            "ours_median": ma,
            "vllm_median": mb,
            "ratio": ma / mb,
            "ratio_ci95": [lo, hi],
            "paired_ratio_median": paired,
            "target_pct": target,
            "within": abs(100 * (ma / mb - 1)) <= target,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=ROOT / "config" / "config.yaml")
    ap.add_argument("--server", default="lora-2", help="a vLLM server of the config with LoRA on")
    ap.add_argument("--results", type=Path, default=ROOT / "results", help="results folder of that study")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--warmup-rounds", type=int, default=2)
    ap.add_argument("--burst", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--json", type=Path, help="also write every round and the summary here")
    args = ap.parse_args()
    if args.rounds < 5:
        ap.error("--rounds: at least 5 alternations")
    setup_job_logging(None)
    config = load_file(args.config)
    spec, model = server_spec(config, args.server, args.results)
    engine = get_engine("vllm")
    prompt = config["workload"]["prompt"]
    with tempfile.TemporaryDirectory() as tmp:
        # ShareGPT layout, plain JSON (vLLM's "custom" JSONL loader needs pandas, which an engine env may lack).
        dataset = Path(tmp) / "prompts.json"
        conv = {"conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": "x " * args.max_tokens}]}
        dataset.write_text(json.dumps([conv] * args.burst))
        srv = engine_server(engine, spec, "127.0.0.1", Path(tmp) / "server.log", None)
        names = sorted(spec.adapters)
        cfg = {
            "base_url": srv.base_url,
            "served_name": spec.served_name,
            "tokenizer": model["path"],
            "dataset": str(dataset),
            "adapters": names,
            "request_models": [engine.request_model(spec, n) for n in names],
            "prompt": prompt,
            "burst": args.burst,
            "max_tokens": args.max_tokens,
            "rounds": args.rounds,
            "warmup_rounds": args.warmup_rounds,
            "out": str(Path(tmp) / "rounds.jsonl"),
        }
        # vLLM's client loads its tokenizer and tokenizes the prompts just before each burst; the tokenizer's
        # thread pool then spins for a while on the cores the server needs (seen on 2 cores: the first
        # scheduler step 30-40 ms slower, every TTFT with it). One thread keeps that off the measurement.
        env = {**os.environ, **engine.environment(spec), **spec.env, "TOKENIZERS_PARALLELISM": "false"}
        with srv:
            srv.wait_ready(config["readiness_timeout_s"])
            subprocess.run(
                [spec.python, str(ROOT / "benchmarks" / "fidelity_driver.py"), json.dumps(cfg)], env=env, check=True
            )
        rows = [json.loads(line) for line in Path(cfg["out"]).read_text().splitlines()]
    for i in sorted({r["round"] for r in rows}):
        o, v = (next(r for r in rows if r["round"] == i and r["client"] == c) for c in ("ours", "vllm"))
        print(
            f"round {i:2d} ({'ours first' if i % 2 == 0 else 'vllm first'}): "
            f"ours {o['throughput']:8.1f} tok/s TTFT {o['ttft']:7.1f} ms ITL {o['itl']:6.2f} ms | "
            f"vllm bench {v['throughput']:8.1f} tok/s TTFT {v['ttft']:7.1f} ms ITL {v['itl']:6.2f} ms"
        )
    summary = summarize(rows)
    print(
        f"\n{spec.server_id}: burst {args.burst} x {args.max_tokens} tokens, adapters {'/'.join(names)} round-robin, "
        f"{summary['rounds']} alternations (after {args.warmup_rounds} warm-up rounds)"
    )
    for key, target in TARGETS:
        f = summary["figures"][key]
        lo, hi = f["ratio_ci95"]
        print(
            f"{key:10s} median ours {f['ours_median']:9.2f}  vllm bench {f['vllm_median']:9.2f}  "
            f"ratio {f['ratio']:.3f} ({100 * (f['ratio'] - 1):+.1f}%, 95% CI {lo:.3f}-{hi:.3f}; "
            f"median per-round ratio {f['paired_ratio_median']:.3f}) target ±{target:g}%"
        )
    ok = all(f["within"] for f in summary["figures"].values())
    print("within targets" if ok else "OUTSIDE targets")
    if args.json:
        write_json(args.json, {"args": {k: str(v) for k, v in vars(args).items()}, "summary": summary, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
