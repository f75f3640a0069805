"""Fidelity: our burst client against vLLM's own load client (``vllm.benchmarks.serve``) on the same server.

One vLLM server of a study's config (its model, adapters and engine environment must already be built, e.g. by
the default study), one workload: the study's prompt, ``--burst`` requests of ``--max-tokens`` tokens sent at
once, adapters a/b round-robin, ignore_eos, temperature 0. Both clients run alternately inside one process of the
engine's Python (``fidelity_driver.py``), so they share CPU placement and start from the same state; the order
flips every round. Each round also sends one shared burst whose requests alternate between our request function
and vLLM's, which compares the two timers on the same requests.

Prints every round, then per figure (output throughput, TTFT median, ITL median, and the send spread: first to
last request start of a burst) the median over rounds of each client, their ratio with a bootstrap 95 % interval
(rounds resampled, seed fixed) and the median of the per-round ratios. Targets: throughput within 3 %, TTFT and
ITL medians within 5 %. Results of the runs quoted in README.md are in benchmarks/results/.

usage (after the default study has built the model, adapters and engine env):
  .venv/bin/python benchmarks/fidelity.py [--rounds 40] [--burst 8] [--max-tokens 64] [--json F]
      [--diagnose metrics,trust-env]
on the H200 (tools/device_study.sh prepare config/gpu-h200.yaml first):
  python3 benchmarks/fidelity.py --config config/gpu-h200.yaml --server vllm-lora-2 --burst 48 --max-tokens 256
several saved runs summarized together (rounds paired within each run):
  .venv/bin/python benchmarks/fidelity.py --pool F1.json F2.json ...
"""

from __future__ import annotations

import argparse
import dataclasses
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

from lorabench.config import detect_hardware, load_file  # noqa: E402
from lorabench.engines import ServerSpec, get_engine  # noqa: E402
from lorabench.io import read_json, setup_job_logging, write_json  # noqa: E402
from lorabench.job import read_inputs_in, server_job  # noqa: E402
from lorabench.server import terminate_on_signals  # noqa: E402
from lorabench.session import engine_server  # noqa: E402

TARGETS = (("throughput", 3.0), ("ttft", 5.0), ("itl", 5.0))
# shown, not a target: time from a burst's first request start to its last (how fast the burst leaves the client)
FIGURES = (*TARGETS, ("send_spread_ms", None))


def server_spec(config: dict, server: str, results: Path) -> tuple[ServerSpec, dict]:
    """The study's server (its job, as the pipeline builds it) with its first two adapters."""
    job = server_job(config, server, detect_hardware(), results=str(results))
    if job.server.engine != "vllm" or not job.server.lora:
        raise SystemExit(f"--server {server}: fidelity needs a vLLM server with LoRA on")
    spec = read_inputs_in(job, config, server, results).spec
    names = sorted(spec.adapters)[:2]
    spec = dataclasses.replace(spec, server_id=f"fidelity-{server}", adapters={n: spec.adapters[n] for n in names})
    return spec, read_json(results / "model" / "manifest.json")


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


def compare(rows: list[dict], a_name: str, b_name: str) -> dict:
    """Per figure: median over rounds of client a and of client b, their ratio (with a bootstrap interval) and
    the median of the per-round ratios."""
    a_rows = {r["round"]: r for r in rows if r["client"] == a_name}
    b_rows = {r["round"]: r for r in rows if r["client"] == b_name}
    rounds = sorted(set(a_rows) & set(b_rows))
    figures: dict[str, dict] = {}
    for key, target in FIGURES if rounds else ():
        if key not in a_rows[rounds[0]] or key not in b_rows[rounds[0]]:
            continue
        a = [a_rows[i][key] for i in rounds]
        b = [b_rows[i][key] for i in rounds]
        ma, mb = statistics.median(a), statistics.median(b)
        lo, hi = bootstrap_ratio(a, b)
        figures[key] = {
            "a_median": ma,
            "b_median": mb,
            "ratio": ma / mb,
            "ratio_ci95": [lo, hi],
            "paired_ratio_median": statistics.median(x / y for x, y in zip(a, b, strict=True)),
            "target_pct": target,
            "within": None if target is None else abs(100 * (ma / mb - 1)) <= target,
        }
    return {"a": a_name, "b": b_name, "rounds": len(rounds), "figures": figures}


def print_comparison(title: str, c: dict) -> None:
    if not c["rounds"]:
        print(f"\n{title}: no rounds with both {c['a']} and {c['b']}")
        return
    print(f"\n{title} ({c['rounds']} rounds)")
    for key, f in c["figures"].items():
        lo, hi = f["ratio_ci95"]
        print(
            f"  {key:10s} median {c['a']} {f['a_median']:9.2f}  {c['b']} {f['b_median']:9.2f}  "
            f"ratio {f['ratio']:.3f} ({100 * (f['ratio'] - 1):+.1f}%, 95% CI {lo:.3f}-{hi:.3f}; "
            f"median per-round ratio {f['paired_ratio_median']:.3f})"
            + ("" if f["target_pct"] is None else f" target ±{f['target_pct']:g}%")
        )


def spread_slope(rows: list[dict], client: str) -> tuple[float, float] | None:
    """Least-squares slope of a client's burst TTFT median on its send spread (ms per ms) across rounds, and
    the correlation: how much a burst that leaves the client more slowly pays in TTFT."""
    pts = [(r["send_spread_ms"], r["ttft"]) for r in rows if r["client"] == client and "send_spread_ms" in r]
    if len(pts) < 3 or len({x for x, _ in pts}) < 2:
        return None
    xs, ys = zip(*pts, strict=True)
    return statistics.linear_regression(xs, ys).slope, statistics.correlation(xs, ys)


def summarize(rows: list[dict]) -> dict:
    """Print and return every comparison the rows allow (rows of one run, or of several runs pooled): the
    --diagnose variants are compared where their clients appear in the rows."""
    clients = {r["client"] for r in rows}
    summary = {"main": compare(rows, "ours", "vllm")}
    print_comparison("our client vs vllm.benchmarks.serve (each its own burst)", summary["main"])
    summary["shared"] = compare(rows, "shared:ours", "shared:vllm")
    print_comparison(
        "same burst, requests alternating between our request function and vLLM's (timing only)", summary["shared"]
    )
    if "vllm-no-metrics" in clients:
        summary["ours+metrics"] = compare(rows, "ours+metrics", "vllm")
        print_comparison("ours with vLLM's two GET /metrics before the burst vs vLLM's client", summary["ours+metrics"])
        summary["vllm-no-metrics"] = compare(rows, "ours", "vllm-no-metrics")
        print_comparison("ours vs vLLM's client without its GET /metrics calls", summary["vllm-no-metrics"])
    if "vllm-no-trust-env" in clients:
        summary["vllm-no-trust-env"] = compare(rows, "ours", "vllm-no-trust-env")
        print_comparison("ours vs vLLM's client with trust_env off", summary["vllm-no-trust-env"])
        summary["trust-env-effect"] = compare(rows, "vllm-no-trust-env", "vllm")
        print_comparison("vLLM's client: trust_env off vs on (its default)", summary["trust-env-effect"])
        summary["shared-no-trust-env"] = compare(rows, "shared-no-trust-env:ours", "shared-no-trust-env:vllm")
        print_comparison(
            "same burst, vLLM's request function on a session with trust_env off", summary["shared-no-trust-env"]
        )
    slopes = {c: spread_slope(rows, c) for c in ("ours", "vllm", "vllm-no-trust-env") if c in clients}
    if any(slopes.values()):
        print("\nTTFT against send spread, within each client (least squares over rounds)")
        for c, fit in slopes.items():
            if fit:
                print(f"  {c:18s} {fit[0]:6.1f} ms of TTFT per ms of send spread (r = {fit[1]:.2f})")
        summary["spread_slopes"] = {c: fit for c, fit in slopes.items() if fit}
    print()
    for key, label in (("main", "vLLM's client as shipped"), ("vllm-no-trust-env", "vLLM's client, trust_env off")):
        if key in summary and summary[key]["rounds"]:
            figs = summary[key]["figures"].values()
            ok = all(f["within"] for f in figs if f["within"] is not None)
            print(f"our client vs {label}: " + ("within targets" if ok else "OUTSIDE targets"))
    return summary


def pool(files: list[Path]) -> int:
    """Summarize saved runs (their --json files) together, rounds keyed by run, without a server."""
    rows: list[dict] = []
    for k, f in enumerate(files):
        run = read_json(f)
        got = run["rows"]
        rows += [{**r, "round": (k, r["round"])} for r in got]
        n = len({r["round"] for r in got})
        print(f"{f}: {n} rounds{' (interrupted run)' if run.get('interrupted') else ''}")
    # a comparison covers the rounds where both of its clients ran, so runs without a variant simply drop out
    summarize(rows)
    return 0


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
    ap.add_argument(
        "--diagnose",
        default="",
        help="comma-separated extra variants: 'metrics' (ours with vLLM's two GET /metrics before the burst, and "
        "vLLM's client without them), 'trust-env' (vLLM's client with its session's trust_env off, and a shared "
        "burst with it off)",
    )
    ap.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="summarize saved runs (--json outputs) together instead of running; nothing else is read",
    )
    args = ap.parse_args()
    if args.pool:
        return pool(args.pool)
    if args.rounds < 5:
        ap.error("--rounds: at least 5 alternations")
    diagnose = [d for d in args.diagnose.split(",") if d]
    unknown = sorted(set(diagnose) - {"metrics", "trust-env"})
    if unknown:
        ap.error(f"--diagnose: unknown variant(s) {', '.join(unknown)} (known: metrics, trust-env)")
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
            # every round is written as it finishes: beside --json when given, so an interrupted run keeps them
            "out": str(args.json.with_suffix(".rounds.jsonl") if args.json else Path(tmp) / "rounds.jsonl"),
            "diagnose": diagnose,
        }
        # vLLM's client loads its tokenizer and tokenizes the prompts just before each burst; the tokenizer's
        # thread pool then spins for a while on the cores the server needs (seen on 2 cores: the first
        # scheduler step 30-40 ms slower, every TTFT with it). One thread keeps that off the measurement.
        env = {**os.environ, **engine.environment(spec), **spec.env, "TOKENIZERS_PARALLELISM": "false"}
        interrupted = ""
        try:
            with terminate_on_signals(), srv:
                srv.wait_ready(config["readiness_timeout_s"])
                subprocess.run(
                    [spec.python, str(ROOT / "benchmarks" / "fidelity_driver.py"), json.dumps(cfg)],
                    env=env,
                    check=True,
                )
        except (SystemExit, KeyboardInterrupt, subprocess.CalledProcessError) as e:
            interrupted = f"{type(e).__name__}: {e}"
        out = Path(cfg["out"])
        rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    done = {r["round"] for r in rows if r["client"] == "shared:vllm"}  # the last line a round writes
    rows = [r for r in rows if r["round"] in done]
    if interrupted:
        print(f"INTERRUPTED ({interrupted}) after {len(done)} complete rounds; what follows covers those only")
    if not done:
        return 1
    for i in sorted({r["round"] for r in rows}):
        o, v = (next(r for r in rows if r["round"] == i and r["client"] == c) for c in ("ours", "vllm"))
        print(
            f"round {i:2d} ({'ours first' if i % 2 == 0 else 'vllm first'}): "
            f"ours {o['throughput']:8.1f} tok/s TTFT {o['ttft']:7.1f} ms ITL {o['itl']:6.2f} ms | "
            f"vllm bench {v['throughput']:8.1f} tok/s TTFT {v['ttft']:7.1f} ms ITL {v['itl']:6.2f} ms"
        )
    print(
        f"\n{spec.server_id}: burst {args.burst} x {args.max_tokens} tokens, adapters {'/'.join(names)} round-robin, "
        f"{len(done)} alternations after {args.warmup_rounds} warm-up rounds"
    )
    summary = summarize(rows)
    if args.json:
        write_json(
            args.json,
            {
                "args": {k: str(v) for k, v in vars(args).items()},
                "interrupted": interrupted,
                "summary": summary,
                "rows": rows,
            },
        )
    return 1 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
