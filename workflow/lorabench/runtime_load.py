"""Runtime adapter loading: time the load call, the first request to the new adapter (cold) against warmed
requests and a resident adapter, and the unload call; repeated.

Only adapters the pipeline built (or the config lists) may be loaded: any other path is refused here, before a
request is sent. The job also checks the engine's own refusal of ``max_cpu_loras < max_loras`` where the engine
has that setting (vLLM), by starting a server with that configuration and expecting it to exit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from . import device
from .device import DeviceLease
from .engines import Engine, ServerSpec, all_server_markers
from .engines.base import adapter_path_allowed
from .harness import CpuPlan
from .io import write_json, write_jsonl
from .job import JobInputs, RuntimeLoad, ServerJob
from .loadgen.client import CompletionRequest, RequestRecord, make_session, run_burst
from .loadtest import (
    AdapterIgnored,
    _median_ms,
    canary,
    engine_server,
    job_hardware,
    prepare_job,
    ready_server,
    requests_of,
)
from .resources import machine_facts
from .server import ManagedServer, ServerStartError, terminate_on_signals

log = logging.getLogger(__name__)


class AdapterNotAllowed(PermissionError):
    """A runtime load of an adapter the pipeline did not build or list."""


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    async with session.post(url, json=body) as r:
        text = await r.text()
        return time.perf_counter() - t0, r.status, text[:300]


def _reqs(
    engine: Engine, spec: ServerSpec, adapter: str, n: int, tag: str, rset: dict[str, Any]
) -> list[CompletionRequest]:
    return requests_of(engine, spec, rset, [adapter] * n, tag)


def _med_ms(recs: list[RequestRecord], attr: str) -> float:
    return _median_ms([getattr(r, attr) for r in recs if r.ok])


async def load_adapter(
    session: aiohttp.ClientSession, base_url: str, engine: Engine, name: str, path: str, allowed: dict[str, str]
) -> tuple[float, int, str]:
    if not adapter_path_allowed(path, allowed):
        raise AdapterNotAllowed(f"runtime load refused: {path} is not an adapter this study built or lists")
    url_path, body = engine.load_adapter_request(name, path)
    return await _post(session, base_url + url_path, body)


async def _cycles(
    job: ServerJob, inputs: JobInputs, engine: Engine, srv: ManagedServer, rset: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    assert job.runtime_load is not None
    rl: RuntimeLoad = job.runtime_load
    spec = inputs.spec
    allowed = inputs.adapter_paths
    new = rl.adapter
    resident = sorted(spec.adapters)[0] if spec.adapters else "base"
    n = rl.burst
    rows: list[dict[str, Any]] = []
    cycles: list[dict[str, Any]] = []
    async with make_session(max(n, 4), srv.api_key) as session:
        # Refusal check first: a path outside the allowlist never reaches the server.
        try:
            await load_adapter(session, srv.base_url, engine, "intruder", "/tmp/not-an-adapter", allowed)
            refused = False
        except AdapterNotAllowed:
            refused = True
        for tag in ("warm-base", "warm-resident"):
            await run_burst(
                session,
                srv.base_url,
                _reqs(engine, spec, "base" if tag == "warm-base" else resident, n, tag, rset),
                job.request_timeout_s,
            )
        for cyc in range(rl.repeats):
            load_s, load_status, load_body = await load_adapter(
                session, srv.base_url, engine, new, allowed[new], allowed
            )
            cold = await run_burst(
                session, srv.base_url, _reqs(engine, spec, new, n, f"c{cyc}/cold", rset), job.request_timeout_s
            )
            warm: list[RequestRecord] = []
            res: list[RequestRecord] = []
            for k in range(rl.warmed_requests):
                warm += await run_burst(
                    session, srv.base_url, _reqs(engine, spec, new, n, f"c{cyc}/warm{k}", rset), job.request_timeout_s
                )
                res += await run_burst(
                    session,
                    srv.base_url,
                    _reqs(engine, spec, resident, n, f"c{cyc}/resident{k}", rset),
                    job.request_timeout_s,
                )
            # The load must really have happened: listed by the server, and changing the output (after the cold and
            # warm bursts, so the check does not warm the adapter up before it is timed).
            async with session.get(srv.base_url + "/v1/models") as r:
                listed = sorted(m["id"] for m in (await r.json(content_type=None)).get("data", []))
            if engine.request_model(spec, new) not in listed and new not in listed:
                raise AdapterIgnored(f"{spec.server_id}: runtime load of {new!r} answered {load_status}, but "
                                     f"/v1/models does not list it ({listed})")  # fmt: skip
            check = await canary(session, srv.base_url, engine, spec, [new])
            path, body = engine.unload_adapter_request(new)
            unload_s, unload_status, unload_body = await _post(session, srv.base_url + path, body)
            after = await run_burst(
                session, srv.base_url, _reqs(engine, spec, new, 1, f"c{cyc}/after-unload", rset), job.request_timeout_s
            )
            c = {
                "cycle": cyc,
                "listed_after_load": True,
                "canary_max_logprob_diff": check["adapters"][new]["max_logprob_diff"],
                "load_s": load_s,
                "load_status": load_status,
                "load_body": load_body,
                "unload_s": unload_s,
                "unload_status": unload_status,
                "unload_body": unload_body,
                "cold_latency_ms": _med_ms(cold, "latency_s"),
                "cold_ttft_ms": _med_ms(cold, "ttft_s"),
                "warm_latency_ms": _med_ms(warm, "latency_s"),
                "warm_ttft_ms": _med_ms(warm, "ttft_s"),
                "resident_latency_ms": _med_ms(res, "latency_s"),
                "resident_ttft_ms": _med_ms(res, "ttft_s"),
                "errors": sum(not r.ok for r in cold + warm + res),
                "request_after_unload_status": after[0].status,
            }
            cycles.append(c)
            log.info(
                "runtime load cycle %d: load %.3f s (HTTP %d), cold TTFT %.1f ms, warm %.1f ms, resident %.1f ms,"
                " unload %.3f s",
                cyc,
                load_s,
                load_status,
                c["cold_ttft_ms"],
                c["warm_ttft_ms"],
                c["resident_ttft_ms"],
                unload_s,
            )
            for group, recs in (("cold", cold), ("warm", warm), ("resident", res), ("after-unload", after)):
                rows += [{**r.to_row(), "cycle": cyc, "group": group} for r in recs]

    def med(key: str) -> float:
        return float(statistics.median(float(c[key]) for c in cycles))

    result = {
        "adapter": new,
        "resident_adapter": resident,
        "burst": n,
        "cycles": cycles,
        "load_s_median": med("load_s"),
        "unload_s_median": med("unload_s"),
        "cold_ttft_ms_median": med("cold_ttft_ms"),
        "warm_ttft_ms_median": med("warm_ttft_ms"),
        "resident_ttft_ms_median": med("resident_ttft_ms"),
        "cold_latency_ms_median": med("cold_latency_ms"),
        "warm_latency_ms_median": med("warm_latency_ms"),
        "resident_latency_ms_median": med("resident_latency_ms"),
        "cold_slower_than_resident": med("cold_latency_ms") > med("resident_latency_ms"),
        "unlisted_path_refused": refused,
        "load_ok": all(c["load_status"] == 200 for c in cycles),
    }
    return result, rows


def probe_cpu_loras(
    engine: Engine,
    spec: ServerSpec,
    host: str,
    out_dir: Path,
    timeout_s: float,
    cpus: CpuPlan | None = None,
    lease: DeviceLease | None = None,
) -> dict[str, Any] | None:
    """Start the engine with max_cpu_loras < max_loras and record whether it refuses (exits before ready)."""
    if not engine.has_cpu_adapter_cache or not spec.max_loras or spec.max_loras < 2:
        return None
    bad = dataclasses.replace(spec, max_cpu_loras=spec.max_loras - 1, runtime_lora=False)
    logp = out_dir / "probe_cpu_loras.log"
    logp.unlink(missing_ok=True)
    srv = engine_server(engine, bad, host, logp, out_dir / "probe.pid", cpus, lease)
    t0 = time.monotonic()
    with srv:
        try:
            srv.wait_ready(timeout_s)
            refused, detail = False, "server started"
        except ServerStartError as e:
            refused = "exited" in str(e)
            lines = [ln for ln in logp.read_text(errors="replace").splitlines() if "max_cpu_loras" in ln]
            detail = lines[-1][-300:] if lines else str(e).splitlines()[0]
    return {
        "max_loras": bad.max_loras,
        "max_cpu_loras": bad.max_cpu_loras,
        "refused": refused,
        "detail": detail,
        "seconds": time.monotonic() - t0,
    }


def run_runtime_load(job: ServerJob, inputs: JobInputs, out_dir: Path, host: str = "127.0.0.1") -> dict[str, Any]:
    """Run one runtime-loading job end to end; returns what is written to ``load.json``."""
    run = prepare_job(job, inputs, out_dir)
    engine, spec, out, cpus = run.engine, inputs.spec, run.out, run.cpus
    with terminate_on_signals(), device.acquire(job_hardware(job), all_server_markers(), spec.server_id) as lease:
        probe = probe_cpu_loras(engine, spec, host, out, job.readiness_timeout_s, cpus, lease)
        srv = engine_server(
            engine, spec, host, run.server_log, out / "server.pid", cpus, lease, secrets.token_urlsafe(24)
        )
        with srv:
            ready_s, _ = ready_server(srv, cpus, job.readiness_timeout_s)
            result, rows = asyncio.run(_cycles(job, inputs, engine, srv, run.rset))
    result.update(
        status="ok",
        server=spec.server_id,
        engine=spec.engine,
        engine_version=inputs.engine_version,
        readiness_s=ready_s,
        max_cpu_loras_probe=probe,
        machine=machine_facts(),
    )
    write_jsonl(out / "records.jsonl", rows)
    write_json(out / "load.json", result)
    run.server_log.replace(out / "server.log")
    return result
