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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import aiohttp

from .device import DeviceLease
from .engines import Engine, ServerSpec
from .engines.base import adapter_path_allowed
from .harness import CpuPlan
from .job import JobInputs, RuntimeLoad, ServerJob
from .jobs import JobKind, Json, kind_settings
from .loadgen.client import RequestRecord, run_burst
from .measure.burst import median_ms
from .measure.measurer import requests_of
from .measure.probes import AdapterIgnored, canary, served_models
from .runtime_figures import load_result
from .server import ServerStartError
from .session import ServerSession, engine_server

log = logging.getLogger(__name__)


class AdapterNotAllowed(PermissionError):
    """A runtime load of an adapter the pipeline did not build or list."""


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    async with session.post(url, json=body) as r:
        text = await r.text()
        return time.perf_counter() - t0, r.status, text[:300]


def _med_ms(recs: list[RequestRecord], attr: str) -> float:
    return median_ms([getattr(r, attr) for r in recs if r.ok])


async def load_adapter(
    session: aiohttp.ClientSession, base_url: str, engine: Engine, name: str, path: str, allowed: dict[str, str]
) -> tuple[float, int, str]:
    if not adapter_path_allowed(path, allowed):
        raise AdapterNotAllowed(f"runtime load refused: {path} is not an adapter this study built or lists")
    url_path, body = engine.load_adapter_request(name, path)
    return await _post(session, base_url + url_path, body)


@dataclass
class Cycler:
    """Runtime loading on one ready server: bursts of one adapter, load and unload calls, the checks that a load
    really happened."""

    job: ServerJob
    rl: RuntimeLoad
    inputs: JobInputs
    engine: Engine
    session: aiohttp.ClientSession
    base_url: str
    rset: dict[str, Any]

    @property
    def resident(self) -> str:
        """The adapter loaded at start that the new one is compared with (the base model where there is none)."""
        return sorted(self.inputs.spec.adapters)[0] if self.inputs.spec.adapters else "base"

    async def burst(self, adapter: str, tag: str, n: int | None = None) -> list[RequestRecord]:
        reqs = requests_of(self.engine, self.inputs.spec, self.rset, [adapter] * (n or self.rl.burst), tag)
        return await run_burst(self.session, self.base_url, reqs, self.job.request_timeout_s)

    async def load(self, name: str, path: str) -> tuple[float, int, str]:
        return await load_adapter(self.session, self.base_url, self.engine, name, path, self.inputs.adapter_paths)

    async def refuses_unlisted(self) -> bool:
        """A path outside the allowlist never reaches the server."""
        try:
            await self.load("intruder", "/tmp/not-an-adapter")
        except AdapterNotAllowed:
            return True
        return False

    async def listed(self, name: str) -> bool:
        listed = await served_models(self.session, self.base_url)
        return any(m in (self.engine.request_model(self.inputs.spec, name), name) for m in listed)

    async def unload(self, name: str) -> tuple[float, int, str]:
        path, body = self.engine.unload_adapter_request(name)
        return await _post(self.session, self.base_url + path, body)

    async def check_loaded(self, name: str, load_status: int) -> float:
        """The load must really have happened: the server lists the adapter and it changes the output; returns
        the canary's largest log-probability difference."""
        spec = self.inputs.spec
        if not await self.listed(name):
            listed = await served_models(self.session, self.base_url)
            raise AdapterIgnored(f"{spec.server_id}: runtime load of {name!r} answered {load_status}, but "
                                 f"/v1/models does not list it ({listed})")  # fmt: skip
        check = await canary(self.session, self.base_url, self.engine, spec, [name])
        return float(check["adapters"][name]["max_logprob_diff"])

    async def cycle(self, cyc: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Load, the first requests (cold), warmed requests beside the resident adapter's, unload, one request
        after the unload; the cycle's figures and its per-request rows."""
        new = self.rl.adapter
        load_s, load_status, load_body = await self.load(new, self.inputs.adapter_paths[new])
        cold = await self.burst(new, f"c{cyc}/cold")
        warm: list[RequestRecord] = []
        res: list[RequestRecord] = []
        for k in range(self.rl.warmed_requests):
            warm += await self.burst(new, f"c{cyc}/warm{k}")
            res += await self.burst(self.resident, f"c{cyc}/resident{k}")
        # Checked after the cold and warm bursts, so the check does not warm the adapter up before it is timed.
        diff = await self.check_loaded(new, load_status)
        unload_s, unload_status, unload_body = await self.unload(new)
        listed_after_unload = await self.listed(new)
        after = await self.burst(new, f"c{cyc}/after-unload", 1)
        # An engine may load an unloaded adapter again for a request that names it (SGLang keeps the path of
        # every adapter it has loaded): then it is unloaded once more, so that the next cycle times a real load.
        reloaded = after[0].ok and await self.listed(new)
        if reloaded:
            await self.unload(new)
        c = {
            "cycle": cyc,
            "listed_after_load": True,
            "canary_max_logprob_diff": diff,
            "load_s": load_s,
            "load_status": load_status,
            "load_body": load_body,
            "unload_s": unload_s,
            "unload_status": unload_status,
            "unload_body": unload_body,
            **{
                f"{group}_{fig}_ms": _med_ms(recs, f"{fig}_s")
                for group, recs in (("cold", cold), ("warm", warm), ("resident", res))
                for fig in ("latency", "ttft")
            },
            "errors": sum(not r.ok for r in cold + warm + res),
            "listed_after_unload": listed_after_unload,
            "request_after_unload_status": after[0].status,
            "reloaded_by_request": reloaded,
        }
        log.info("runtime load cycle %d: load %.3f s (HTTP %d), cold TTFT %.1f ms, warm %.1f ms, resident %.1f ms,"
                 " unload %.3f s", cyc, load_s, load_status, c["cold_ttft_ms"], c["warm_ttft_ms"],
                 c["resident_ttft_ms"], unload_s)  # fmt: skip
        groups = (("cold", cold), ("warm", warm), ("resident", res), ("after-unload", after))
        return c, [{**r.to_row(), "cycle": cyc, "group": group} for group, recs in groups for r in recs]

    async def run(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The refusal check, warm-up of the base model and the resident adapter, then every cycle."""
        refused = await self.refuses_unlisted()
        for tag, adapter in (("warm-base", "base"), ("warm-resident", self.resident)):
            await self.burst(adapter, tag)
        cycles: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        for cyc in range(self.rl.repeats):
            c, r = await self.cycle(cyc)
            cycles.append(c)
            rows += r
        return load_result(cycles, self.rl, self.resident, refused), rows


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


@dataclass
class LoadResult:
    """A runtime-loading job's outputs: ``load.json`` (``load_result``'s figures, the refusal probe, the server's
    head) and the per-request rows."""

    result: Json
    rows: list[Json]

    def to_json(self) -> Json:
        return self.result

    def files(self) -> dict[str, Json | list[Json]]:
        return {"load.json": self.result, "records.jsonl": self.rows}


@dataclass
class RuntimeLoading(JobKind):
    """Runtime adapter loading (the module's docstring) on the job's server, started without the runtime adapter:
    first the refusal probe of ``max_cpu_loras < max_loras`` on a server of its own, then the cycles."""

    params: RuntimeLoad
    name: ClassVar[str] = "runtime_load"
    folder: ClassVar[str] = "runtime_load"
    files: ClassVar[tuple[str, ...]] = ("load.json", "records.jsonl")

    def settings(self) -> Json:
        return dataclasses.asdict(self.params)

    @classmethod
    def from_json(cls, text: str) -> RuntimeLoading:
        return cls(RuntimeLoad(**kind_settings(text, cls.name)))

    def run(self, session: ServerSession) -> LoadResult:
        job, rl = session.job, self.params
        cpu_loras = probe_cpu_loras(session.engine, session.spec, session.host, session.out, job.readiness_timeout_s,
                                    session.cpus, session.lease)  # fmt: skip
        with session.serving() as srv:
            result, rows = asyncio.run(self._cycles(session, srv.base_url, rl))
        return LoadResult({**result, "max_cpu_loras_probe": cpu_loras, **session.side_head()}, rows)

    @staticmethod
    async def _cycles(session: ServerSession, base_url: str, rl: RuntimeLoad) -> tuple[Json, list[Json]]:
        async with session.client(max(rl.burst, 4)) as http:
            return await Cycler(session.job, rl, session.inputs, session.engine, http, base_url, session.rset).run()
