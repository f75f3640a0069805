"""One job's hold on a server configuration: the device lease, the CPU plan, the request set, and the server's
starts (each one started, waited ready, its threads placed, always stopped), with the facts every job records.

A job kind (``jobs.JobKind``) does its measuring through a ``ServerSession`` and never starts or stops a process
itself: ``ServerSession.open`` takes the device (and releases it, also on errors and signals), ``serving`` gives a
ready server for the block and stops it after, timing both. The facts head (``facts``) is made at the first start:
the server's configuration and argv, the machine, the device, the harness and where the CPUs went.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from . import device
from .device import FOREIGN_SERVERS, DeviceLease
from .engines import Engine, ServerSpec, all_server_markers, get_engine
from .harness import CpuPlan, confine_group, pin_self, plan_cpus
from .io import read_json
from .job import JobInputs, ServerJob
from .loadgen.client import make_session
from .loadgen.workload import set_key
from .measure.probes import canary, probe_server
from .resources import gpu_memory, group_rss_mib, machine_facts
from .server import ManagedServer, free_port, study_api_key, terminate_on_signals

log = logging.getLogger(__name__)
# in the facts of a job measured beside servers of other runs (device.FOREIGN_SERVERS): its figures share the machine
IGNORED = f"servers outside the job ignored ({FOREIGN_SERVERS}=ignore)"


def engine_server(
    engine: Engine,
    spec: ServerSpec,
    host: str,
    log_path: Path,
    pidfile: Path | None,
    cpus: CpuPlan | None = None,
    lease: DeviceLease | None = None,
    api_key: str | None = None,
) -> ManagedServer:
    """A managed server for one spec on a free loopback port (not started yet), on the CPUs ``cpus`` gives it
    and the device ``lease`` holds, requiring ``api_key`` from its clients where one is given."""
    port = free_port(host)
    cpus = cpus or CpuPlan()
    env = {**engine.environment(spec), **(engine.cpu_threads_env(cpus.engine_threads) if cpus.engine_threads else {})}
    env.update(lease.env if lease else {})
    env.update(engine.api_key_env(api_key) if api_key else {})
    env.update(engine.compile_cache_env(spec.compile_cache))
    return ManagedServer(
        engine.command(spec, host, port) + (engine.api_key_args(api_key) if api_key else []),
        {**env, **spec.env},
        log_path,
        host,
        port,
        engine.ready_path,
        pidfile=pidfile,
        # A CPU build binds its compute threads itself, inside the CPUs it starts with: it starts unconfined and
        # the rest of its threads are moved once it is ready (``ready_server``).
        cpus=None if cpus.engine_threads else cpus.server,
        api_key=api_key,
    )


def ready_server(srv: ManagedServer, cpus: CpuPlan, timeout_s: float) -> tuple[float, dict[str, int]]:
    """Wait until the server answers, then put its threads where ``cpus`` says."""
    ready = srv.wait_ready(timeout_s)
    assert srv.proc is not None
    placed = confine_group(srv.proc.pid, cpus) if cpus.engine_threads else {}
    if placed:
        log.info("server threads placed: %d of the front end on CPUs %s, %d of the engine on CPUs %s (%d kept)",
                 placed["front_end"], list(cpus.server or ()), placed["engine"], list(cpus.engine_threads or ()),
                 placed["kept"])  # fmt: skip
    return ready, placed


def job_hardware(job: ServerJob) -> str:
    return job.hardware or ("gpu" if gpu_memory() else "cpu")


def job_cpus(job: ServerJob) -> CpuPlan:
    """The job's CPU layout; the calling process (the client) is pinned to its share at once."""
    plan = plan_cpus(job.harness["pin"], job_hardware(job))
    pin_self(plan.client)
    return plan


def read_request_set(job: ServerJob, inputs: JobInputs) -> dict[str, Any]:
    """The request set, checked to hold every (condition, burst) set the job measures."""
    rset: dict[str, Any] = read_json(inputs.request_set)
    missing = [c for c in job.conditions for b in job.bursts if set_key(c, b) not in rset["sets"]]
    if missing:
        raise ValueError(f"request set {inputs.request_set} lacks conditions {sorted(set(missing))}")
    return rset


@dataclass
class ServerSession:
    """A job's device, CPUs and server starts (the module's docstring). Made by ``open``."""

    job: ServerJob
    inputs: JobInputs
    engine: Engine
    rset: dict[str, Any]
    out: Path  # the job's output folder
    host: str
    cpus: CpuPlan
    lease: DeviceLease
    api_key: str
    facts: dict[str, Any] = field(default_factory=dict)  # the head, once a server was made
    readiness: list[float] = field(default_factory=list)  # seconds to ready, per start
    stop_s: float = 0.0  # seconds the stops took, in all
    started: float = field(default_factory=time.monotonic)

    @property
    def spec(self) -> ServerSpec:
        return self.inputs.spec

    @property
    def server_log(self) -> Path:
        """The server's log while the job runs; moved to ``server.log`` once everything succeeded."""
        return self.out / "server.log.partial"

    @classmethod
    @contextlib.contextmanager
    def open(cls, job: ServerJob, inputs: JobInputs, out_dir: Path, host: str = "127.0.0.1") -> Iterator[ServerSession]:
        """The engine checked against the spec, the request set read, the output folder made (an earlier
        attempt's partial log removed), the client pinned; then the device held for the block."""
        engine = get_engine(inputs.spec.engine)
        engine.check(inputs.spec)
        rset = read_request_set(job, inputs)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "server.log.partial").unlink(missing_ok=True)
        cpus = job_cpus(job)
        key = study_api_key(out_dir.parents[1])  # results/KIND/SERVER -> results
        with terminate_on_signals(), device.acquire(job_hardware(job), all_server_markers(), job.server_id) as lease:
            yield cls(job, inputs, engine, rset, out_dir, host, cpus, lease, key)

    def server(self) -> ManagedServer:
        """The job's server (not started), with the facts head made the first time."""
        srv = engine_server(
            self.engine, self.spec, self.host, self.server_log, self.out / "server.pid", self.cpus, self.lease,
            self.api_key,
        )  # fmt: skip
        if not self.facts:
            self.facts = self.facts_head(srv)
        return srv

    def facts_head(self, srv: ManagedServer) -> dict[str, Any]:
        job = self.job
        return {
            "server": job.server_id,
            "engine": job.server.engine,
            "engine_version": self.inputs.engine_version,
            "status": "ok",
            "config": job.facts_config(),
            "argv": srv.public_argv,
            "api_key_required": bool(srv.api_key),
            "machine": machine_facts(),
            "device": self.lease.device,
            "harness": {**job.harness, "cpus": self.cpus.as_dict()},
            "measurement": job.measurement_facts(),
            **({} if self.lease.foreign_checked else {"device_check": IGNORED}),
        }

    @contextlib.contextmanager
    def serving(self) -> Iterator[ManagedServer]:
        """One start of the server: started, ready, its threads placed, yielded; always stopped after. The facts
        get the device's memory before and at ready (first start), the host memory of the server's processes at
        ready (first start) and at the end (every start), where its threads went."""
        srv = self.server()
        first = not self.readiness
        with srv:
            if first:
                self.facts["gpu_memory_before_mib"] = gpu_memory()
            ready, placed = ready_server(srv, self.cpus, self.job.readiness_timeout_s)
            self.readiness.append(ready)
            self.facts["harness"]["threads_placed"] = placed
            assert srv.proc is not None
            if first:
                self.facts["gpu_memory_ready_mib"] = gpu_memory()
                self.facts["host_rss_ready_mib"] = group_rss_mib(srv.proc.pid)
            yield srv
            self.facts["host_rss_end_mib"] = group_rss_mib(srv.proc.pid)
            t_stop = time.monotonic()
        self.stop_s += time.monotonic() - t_stop

    def client(self, connections: int) -> aiohttp.ClientSession:
        """An HTTP client for the server, ``connections`` at once, sending the study's key."""
        return make_session(connections, self.api_key)

    async def canary(self, http: aiohttp.ClientSession, base_url: str) -> dict[str, Any] | None:
        """Each adapter loaded at start changes the output (``measure.probes.canary``); None without adapters."""
        if not (self.spec.lora and self.spec.adapters):
            return None
        checked = await canary(http, base_url, self.engine, self.spec, sorted(self.spec.adapters))
        log.info("canary: every adapter changes the output (%s)", ", ".join(sorted(self.spec.adapters)))
        return checked

    async def probes(self, http: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
        return await probe_server(http, base_url, self.engine, self.spec)

    def server_log_text(self) -> str:
        return self.server_log.read_text(errors="replace")

    def parse_log(self) -> dict[str, Any]:
        """What the engine's log says (its version, KV cache, ...)."""
        return dict(self.engine.parse_log(self.server_log_text()))

    def side_head(self) -> dict[str, Any]:
        """What a job beside the measuring ones (runtime loading, prefix caching) records of its server."""
        return {
            "status": "ok",
            "server": self.spec.server_id,
            "engine": self.spec.engine,
            "engine_version": self.inputs.engine_version,
            "readiness_s": self.readiness[0] if self.readiness else None,
            "machine": machine_facts(),
        }

    def finish(self) -> None:
        """The server's log to its place, once everything succeeded."""
        self.server_log.replace(self.out / "server.log")
