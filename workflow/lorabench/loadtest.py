"""One server job: start the server, wait ready, warm up, run every measurement in shuffled order, probe,
collect logs and metrics, always stop.

Inputs arrive as one plain dict (``LoadtestJob``), built by the Snakemake rule from ``params`` and ``input``;
the same dict can be written to JSON and run with ``lorabench job loadtest SPEC.json`` on a machine without
Snakemake (a GPU box). Outputs are written only after the server has stopped and everything succeeded, each
file atomically, so an interrupted job never leaves results that look complete.
"""

from __future__ import annotations

import asyncio
import logging
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from .engines import Engine, ServerSpec, get_engine
from .io import read_json, write_json, write_jsonl
from .loadgen.client import CompletionRequest, RequestRecord, make_session, run_burst, run_concurrency
from .loadgen.workload import measurement_plan, set_key
from .metrics import MetricsSampler, summarize_samples
from .resources import gpu_memory, group_rss_mib, machine_facts
from .server import ManagedServer, free_port, terminate_on_signals

log = logging.getLogger(__name__)


@dataclass
class LoadtestJob:
    server: dict[str, Any]  # ServerSpec fields
    request_set: str  # path of the request-set JSON
    conditions: list[str]
    bursts: list[int]
    repetitions: int
    bursts_per_measurement: int = 1
    warmup_bursts: int = 1
    shuffle_seed: int = 0
    request_timeout_s: float = 300.0
    readiness_timeout_s: float = 600.0
    metrics_interval_s: float = 0.5
    load: dict[str, Any] = field(default_factory=lambda: {"shape": "burst"})
    engine_version: str = ""
    out_dir: str = "."
    host: str = "127.0.0.1"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoadtestJob:
        return cls(**d)


def _requests_for(
    engine: Engine, spec: ServerSpec, rset: dict[str, Any], condition: str, burst: int, tag: str
) -> list[CompletionRequest]:
    rows = rset["sets"][set_key(condition, burst)]
    return [
        CompletionRequest(
            request_id=f"{spec.server_id}/{tag}/{r['request_id']}",
            adapter=r["adapter"],
            model=engine.request_model(spec, r["adapter"]),
            prompt=rset["prompt"],
            max_tokens=int(rset["max_tokens"]),
            temperature=float(rset["temperature"]),
            ignore_eos=bool(rset["ignore_eos"]),
        )
        for r in rows
    ]


def _median_ms(values: list[float]) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return 1000.0 * statistics.median(vals) if vals else float("nan")


def measurement_row(records: list[RequestRecord], base: dict[str, Any]) -> dict[str, Any]:
    """Aggregate one measurement (one or more consecutive bursts). Throughput counts completed requests' tokens
    only; a measurement with any error is marked, never silently averaged."""
    ok = [r for r in records if r.ok]
    t0 = min(r.start_s for r in records)
    t1 = max(r.end_s for r in records)
    duration = t1 - t0
    tokens = sum(r.completion_tokens for r in ok)
    itl = [x for r in ok for x in r.itl_s]
    errors = [r.error for r in records if not r.ok]
    return {
        **base,
        "n_requests": len(records),
        "n_ok": len(ok),
        "n_errors": len(errors),
        "errors": sorted(set(errors))[:5],
        "completion_tokens": tokens,
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "duration_s": duration,
        "throughput_tok_s": tokens / duration if duration > 0 else float("nan"),
        "ttft_median_ms": _median_ms([r.ttft_s for r in ok]),
        "itl_median_ms": _median_ms(itl),
        "latency_median_ms": _median_ms([r.latency_s for r in ok]),
        "wall_start": min(r.wall_start for r in records),
    }


async def _probe(session: aiohttp.ClientSession, base_url: str, engine: Engine, spec: ServerSpec) -> dict[str, Any]:
    """Operational checks a user relies on: served names are listed; a wrong model name is refused."""
    out: dict[str, Any] = {}
    async with session.get(base_url + "/v1/models") as r:
        body = await r.json()
    out["models_listed"] = sorted(m["id"] for m in body.get("data", []))
    expected = sorted({spec.served_name, *(engine.request_model(spec, a) for a in spec.adapters)})
    out["models_expected"] = expected
    out["models_listed_ok"] = all(m in out["models_listed"] for m in expected)
    bad = CompletionRequest(
        "probe/wrong-model", "no-such-adapter", engine.request_model(spec, "no-such-adapter-x"), "hello", 4
    )
    payload = bad.payload()
    payload["stream"] = False
    payload.pop("stream_options", None)
    async with session.post(base_url + "/v1/completions", json=payload) as r:
        out["wrong_model_status"] = r.status
        out["wrong_model_body"] = (await r.text())[:300]
    out["wrong_model_rejected"] = out["wrong_model_status"] >= 400
    return out


async def send(
    session: aiohttp.ClientSession, base_url: str, reqs: list[CompletionRequest], job: LoadtestJob
) -> list[RequestRecord]:
    """One burst, or the same requests under bounded concurrency (optionally paced and cut at a duration)."""
    load = job.load
    if load.get("shape", "burst") == "burst":
        return await run_burst(session, base_url, reqs, job.request_timeout_s)
    return await run_concurrency(
        session,
        base_url,
        reqs,
        concurrency=int(load.get("concurrency") or len(reqs)),
        timeout_s=job.request_timeout_s,
        duration_s=load.get("duration_s"),
        rate_per_s=load.get("rate_per_s"),
    )


async def _measure_all(
    job: LoadtestJob, engine: Engine, spec: ServerSpec, srv: ManagedServer, rset: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    records: list[dict[str, Any]] = []
    measurements: list[dict[str, Any]] = []
    metric_rows: list[dict[str, Any]] = []
    max_burst = max(job.bursts)
    async with make_session(max_burst) as session:
        # Warm-up: every condition x burst, recorded, flagged, excluded from statistics.
        for cond in job.conditions:
            for burst in sorted(job.bursts):
                for w in range(job.warmup_bursts):
                    reqs = _requests_for(engine, spec, rset, cond, burst, f"warmup{w}")
                    warm_recs = await send(session, srv.base_url, reqs, job)
                    mid = f"warmup/{cond}/{burst}/{w}"
                    base = {
                        "server": spec.server_id,
                        "condition": cond,
                        "burst": burst,
                        "rep": -1 - w,
                        "order": -1,
                        "warmup": True,
                        "measurement_id": mid,
                    }
                    row = measurement_row(warm_recs, base)
                    measurements.append(row)
                    records += [{**r.to_row(), **base} for r in warm_recs]
                    log.info(
                        "warm-up %-10s burst %3d: %8.1f tok/s, %d errors",
                        cond,
                        burst,
                        row["throughput_tok_s"],
                        row["n_errors"],
                    )
        plan = measurement_plan(job.conditions, job.bursts, job.repetitions, job.shuffle_seed)
        gpu_peak: dict[int, int] = {}
        t_start = time.monotonic()
        for i, cell in enumerate(plan):
            cond, burst, rep = cell["condition"], cell["burst"], cell["rep"]
            mid = f"{cond}/{burst}/{rep}"
            sampler = MetricsSampler(
                session, srv.base_url + engine.metrics_path, engine.metric_prefixes, job.metrics_interval_s
            )
            sampler.start()
            recs: list[RequestRecord] = []
            for k in range(job.bursts_per_measurement):
                reqs = _requests_for(engine, spec, rset, cond, burst, f"{mid}/{k}")
                recs += await send(session, srv.base_url, reqs, job)
            samples = await sampler.stop()
            for g in gpu_memory() or []:
                gpu_peak[g["index"]] = max(gpu_peak.get(g["index"], 0), g["used_mib"])
            base = {
                "server": spec.server_id,
                "condition": cond,
                "burst": burst,
                "rep": rep,
                "order": cell["order"],
                "warmup": False,
                "measurement_id": mid,
            }
            row = measurement_row(recs, base)
            row["metrics"] = summarize_samples(samples)
            measurements.append(row)
            records += [{**r.to_row(), **base} for r in recs]
            metric_rows += [{**s, "measurement_id": mid} for s in samples]
            elapsed = time.monotonic() - t_start
            eta = elapsed / (i + 1) * (len(plan) - i - 1)
            log.info(
                "[%s %d/%d] %-10s burst %3d rep %d: %8.1f tok/s, ITL %.1f ms, %d errors (eta %.0f s)",
                spec.server_id,
                i + 1,
                len(plan),
                cond,
                burst,
                rep,
                row["throughput_tok_s"],
                row["itl_median_ms"],
                row["n_errors"],
                eta,
            )
        probes = await _probe(session, srv.base_url, engine, spec)
        probes["gpu_memory_peak_mib"] = gpu_peak or None
    return records, measurements, metric_rows, probes


def engine_server(engine: Engine, spec: ServerSpec, host: str, log_path: Path, pidfile: Path | None) -> ManagedServer:
    """A managed server for one spec on a free loopback port (not started yet)."""
    port = free_port(host)
    return ManagedServer(
        engine.command(spec, host, port),
        {**engine.environment(spec), **spec.env},
        log_path,
        host,
        port,
        engine.ready_path,
        pidfile=pidfile,
    )


def _server_config(spec: ServerSpec, conditions: list[str], bursts: list[int]) -> dict[str, Any]:
    return {
        "lora": spec.lora,
        "max_loras": spec.max_loras,
        "max_cpu_loras": spec.max_cpu_loras,
        "max_lora_rank": spec.max_lora_rank,
        "adapters": sorted(spec.adapters),
        "conditions": conditions,
        "bursts": sorted(bursts),
        "args": spec.args,
    }


def run_loadtest(job: LoadtestJob) -> dict[str, Any]:
    """Run one server job end to end; returns the server facts written to ``facts.json``."""
    engine = get_engine(job.server["engine"])
    spec = ServerSpec(**job.server)
    engine.check(spec)
    rset = read_json(job.request_set)
    missing = [c for c in job.conditions for b in job.bursts if set_key(c, b) not in rset["sets"]]
    if missing:
        raise ValueError(f"request set {job.request_set} lacks conditions {sorted(set(missing))}")
    out = Path(job.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    server_log = out / "server.log.partial"
    server_log.unlink(missing_ok=True)
    srv = engine_server(engine, spec, job.host, server_log, out / "server.pid")
    facts: dict[str, Any] = {
        "server": spec.server_id,
        "engine": spec.engine,
        "engine_version": job.engine_version,
        "status": "ok",
        "config": _server_config(spec, job.conditions, job.bursts),
        "argv": srv.argv,
        "machine": machine_facts(),
    }
    with terminate_on_signals(), srv:
        facts["gpu_memory_before_mib"] = gpu_memory()
        facts["readiness_s"] = srv.wait_ready(job.readiness_timeout_s)
        facts["gpu_memory_ready_mib"] = gpu_memory()
        assert srv.proc is not None
        facts["host_rss_ready_mib"] = group_rss_mib(srv.proc.pid)
        records, measurements, metric_rows, probes = asyncio.run(_measure_all(job, engine, spec, srv, rset))
        facts["host_rss_end_mib"] = group_rss_mib(srv.proc.pid)
        facts["probes"] = probes
    facts["gpu_memory_after_stop_mib"] = gpu_memory()
    log_text = server_log.read_text(errors="replace")
    facts["log"] = engine.parse_log(log_text)
    if facts["log"].get("engine_version") and not facts["engine_version"]:
        facts["engine_version"] = facts["log"]["engine_version"]
    write_jsonl(out / "records.jsonl", records)
    write_jsonl(out / "measurements.jsonl", measurements)
    write_jsonl(out / "metrics.jsonl", metric_rows)
    write_json(out / "facts.json", facts)
    server_log.replace(out / "server.log")
    return facts


def job_from_rule(params: dict[str, Any], inputs: Any, out_dir: Path) -> LoadtestJob:
    """Resolve a rule's plain params and input files into a job: interpreter, model and adapter paths."""
    env_info = read_json(inputs.env)
    model = read_json(inputs.model)
    adapter_paths = {}
    for f in inputs.adapters:
        m = read_json(f)
        adapter_paths[m["name"]] = m["path"]
    server = {
        "server_id": params["server_id"],
        "engine": params["engine"],
        "python": env_info["python"],
        "env": {**env_info.get("env", {}), **params["env"]},
        "model_path": model["path"],
        "served_name": params["served_name"],
        "lora": params["lora"],
        "adapters": {a: adapter_paths[a] for a in params["adapters"]},
        "max_loras": params["max_loras"],
        "max_cpu_loras": params["max_cpu_loras"],
        "max_lora_rank": params["max_lora_rank"],
        "runtime_lora": params["runtime_lora"],
        "args": params["args"],
    }
    extra = {"all_adapter_paths": adapter_paths, "engine_id": params["engine_id"]}
    return LoadtestJob(
        server=server,
        request_set=str(inputs.requests),
        conditions=list(params["conditions"]),
        bursts=list(params["bursts"]),
        repetitions=int(params["repetitions"]),
        bursts_per_measurement=int(params["bursts_per_measurement"]),
        warmup_bursts=int(params["warmup_bursts"]),
        shuffle_seed=int(params["shuffle_seed"]),
        request_timeout_s=float(params["request_timeout_s"]),
        readiness_timeout_s=float(params["readiness_timeout_s"]),
        metrics_interval_s=float(params["metrics_interval_s"]),
        load=dict(params.get("load") or {"shape": "burst"}),
        engine_version=env_info.get("version") or "",
        out_dir=str(out_dir),
        extra=extra,
    )


def write_not_run(params: dict[str, Any], out_dir: Path, reason: str) -> None:
    """Outputs of a server that cannot run here: empty tables and facts that say why, never made-up numbers."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("records.jsonl", "measurements.jsonl", "metrics.jsonl"):
        write_jsonl(out_dir / name, [])
    (out_dir / "server.log").write_text(f"# {reason}\n")
    write_json(
        out_dir / "facts.json",
        {
            "server": params["server_id"],
            "engine": params["engine"],
            "engine_version": params["engine_version"],
            "status": reason,
            "config": {
                k: params[k]
                for k in (
                    "lora",
                    "max_loras",
                    "max_cpu_loras",
                    "max_lora_rank",
                    "adapters",
                    "conditions",
                    "bursts",
                    "args",
                )
            },
            "machine": machine_facts(),
        },
    )
    log.info("%s: %s", params["server_id"], reason)
