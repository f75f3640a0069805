"""The rate sweep, one job kind (``jobs.JobKind``): on one start of the server, the canary, then for each adapter
mix the server can serve a saturation probe and Poisson arrivals at rising rates, repeated in interleaved cycles
(``measure.sweep``: the rates, over-saturation, the points); the probes after. Writes ``sweep.json`` (one
``SweepResult`` per mix, the SLO, the server's head), ``records.jsonl`` (one row per request) and ``facts.json``
(the server's facts, as a load test writes them). Capacity at the SLO is analysis (``capacity``), computed from
the points.

The requests of a mix carry the workload's first prompt and output length (the request set's ``prompt`` and
``max_tokens``), each one's adapter drawn by the mix's assignment from the workload's seed: the same sequence on
every server.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from .config import rate_sweep_mixes
from .job import ServerJob
from .jobs import JobKind, Json, kind_settings, not_run_facts
from .measure.sweep import MixRequests, SweepOutcome, SweepSettings, sweep_server
from .nvml import GpuBusy, gpu_busy_for
from .resources import boot_id, cpu_share, cpu_ticks
from .session import ServerSession

log = logging.getLogger(__name__)

SWEEP_JOB_SCHEMA = "lorabench.sweep_job/1"


def ran() -> Json:
    """When the sweep started (UTC) and on which boot of which machine (``resources.boot_id``): a table that
    compares sweeps of several runs (another day, another lent machine) says so (``capacity``)."""
    return {"started_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "boot_id": boot_id()}


@dataclass
class ServerMeter:
    """``measure.sweep.RunMeter`` for a server this job started: the share of one CPU its HTTP front end (the
    process group's leader, all its threads) used over a run, from /proc before and after it, and the GPU's busy
    share over the run (NVML; none on a machine without one). A front end near one full CPU where the SLO stops
    being met says the capacity is the front end's, not the engine's (``capacity.host_at_capacity``)."""

    pid: int
    busy: GpuBusy | None = None

    def start(self) -> tuple[float, int | None]:
        return time.time(), cpu_ticks(self.pid)

    def stop(self, token: tuple[float, int | None]) -> dict[str, float]:
        (t0, fe0), t1, fe1 = token, time.time(), cpu_ticks(self.pid)
        out: dict[str, float] = {}
        front_end = cpu_share(fe0, fe1, t1 - t0)
        if front_end is not None:
            out["front_end_cpu"] = front_end
        share = self.busy.share(t0, t1) if self.busy is not None else None
        if share is not None:
            out["gpu_busy_pct"] = share
        return out


@dataclass
class SweepJobResult:
    """A sweep job's outputs (the module's docstring)."""

    head: Json  # status, server, engine, engine_version, readiness_s, machine, ran (``ran``)
    settings: SweepSettings
    mixes: list[str]
    outcome: SweepOutcome
    facts: Json = field(default_factory=dict)

    def to_json(self) -> Json:
        return {
            "schema": SWEEP_JOB_SCHEMA,
            **self.head,
            "mixes": list(self.mixes),
            "slo": self.settings.slo.to_json(),
            "settings": self.settings.to_json(),
            "sweeps": [r.to_json() for r in self.outcome.results],
        }

    def files(self) -> dict[str, Json | list[Json]]:
        return {"sweep.json": self.to_json(), "records.jsonl": self.outcome.records, "facts.json": self.facts}


@dataclass
class RateSweep(JobKind):
    """A rate sweep of ``mixes`` (conditions the server can serve, with their definitions) at ``settings``."""

    mixes: list[str]
    conditions: dict[str, Json]  # the mixes' condition definitions (adapters, assignment, ...)
    params: SweepSettings
    name: ClassVar[str] = "rate_sweep"
    folder: ClassVar[str] = "rate_sweep"
    files: ClassVar[tuple[str, ...]] = ("sweep.json", "records.jsonl", "facts.json")

    @classmethod
    def of_config(cls, config: dict[str, Any], server: str) -> RateSweep:
        """The sweep of ``servers.SERVER`` in a checked config with ``rate_sweep``."""
        mixes = rate_sweep_mixes(config).get(server)
        if not mixes:
            raise ValueError(f"rate_sweep.servers: {server!r} is not listed, or serves none of rate_sweep.mixes")
        params = SweepSettings.from_config(config["rate_sweep"], config["workload"]["seed"],
                                           config["request_timeout_s"])  # fmt: skip
        # what draws a mix's adapters (not its description or role: editing those reruns no sweep)
        draws = {
            m: {k: v for k, v in config["conditions"][m].items() if k not in ("description", "role")} for m in mixes
        }
        return cls(list(mixes), draws, params)

    def settings(self) -> Json:
        return {"mixes": self.mixes, "conditions": self.conditions, "settings": self.params.to_json()}

    @classmethod
    def from_json(cls, text: str) -> RateSweep:
        d = kind_settings(text, cls.name)
        return cls(list(d["mixes"]), dict(d["conditions"]), SweepSettings.from_json(d["settings"]))

    def not_run(self, job: ServerJob, reason: str) -> dict[str, Json | list[Json]]:
        head = {"schema": SWEEP_JOB_SCHEMA, "server": job.server_id, "engine": job.server.engine, "status": reason,
                "mixes": self.mixes, "slo": self.params.slo.to_json(), "sweeps": []}  # fmt: skip
        return {"sweep.json": head, "records.jsonl": [], "facts.json": not_run_facts(job, reason)}

    def run(self, session: ServerSession) -> SweepJobResult:
        t0 = time.monotonic()
        started = ran()
        with session.serving() as srv:
            assert srv.proc is not None
            meter = ServerMeter(srv.proc.pid, gpu_busy_for(session.lease.device))
            outcome, probes = asyncio.run(self._sweep(session, srv.base_url, meter))
            session.facts["probes"] = probes
        facts = session.facts
        facts["readiness_s"] = session.readiness[0]
        facts["readiness_starts_s"] = session.readiness
        facts["timing"] = {"readiness_s": session.readiness[0], "stop_s": session.stop_s,
                           "total_s": time.monotonic() - t0}  # fmt: skip
        facts["measurement"] = {"method": "rate_sweep", **self.params.to_json(), "mixes": self.mixes}
        facts["log"] = session.parse_log()
        if facts["log"].get("engine_version") and not facts["engine_version"]:
            facts["engine_version"] = facts["log"]["engine_version"]
        for cap in outcome.capacities(self.params.slo):
            log.info("%s/%s: capacity at the SLO %.2f req/s [%.2f, %.2f] over %d cycles (%d censored)", cap.server,
                     cap.mix, cap.capacity_per_s, cap.lo, cap.hi, cap.n, cap.censored)  # fmt: skip
        return SweepJobResult({**session.side_head(), "ran": started}, self.params, self.mixes, outcome, facts)

    async def _sweep(self, session: ServerSession, base_url: str, meter: ServerMeter) -> tuple[SweepOutcome, Json]:
        """The canary on a client of its own, the sweep, then the probes."""
        spec, rset = session.spec, session.rset
        async with session.client(4) as http:
            checked = await session.canary(http, base_url)
        source = MixRequests(
            spec.server_id,
            self.conditions,
            str(rset["prompt"]),
            int(rset["max_tokens"]),
            lambda a: session.engine.request_model(spec, a),
            self.params.seed,
            temperature=float(rset["temperature"]),
            ignore_eos=bool(rset["ignore_eos"]),
        )
        outcome = await sweep_server(base_url, spec.server_id, self.mixes, source, self.params, session.api_key,
                                     session.job.harness["gc"], meter)  # fmt: skip
        async with session.client(4) as http:
            probes = await session.probes(http, base_url)
        probes["canary"] = checked
        return outcome, probes
