"""The load test, one job kind (``jobs.JobKind``): start the server ``server_starts`` times in turn, on each
measure its share of the cycles (``measure.measurer.Measurer``: canary, warm-up, cycles of bursts, probes), and
write the bursts (``measurements.jsonl``), the requests (``records.jsonl``), the engine's metrics
(``metrics.jsonl``) and the server's facts (``facts.json``).

The job arrives as one ``ServerJob`` (lorabench.job: the rule's params) with its input files; the same can be
written to JSON and run with ``lorabench job loadtest SPEC.json`` on a machine without Snakemake (a GPU box).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from .job import ServerJob
from .jobs import JobKind, Json, not_run_facts
from .measure.burst import Burst
from .measure.cycles import cycles_per_start
from .measure.measurer import Measurer, client_connections, job_targets, per_adapter
from .nvml import gpu_busy_for
from .resources import GpuTelemetry, HostTelemetry, gpu_memory
from .session import ServerSession

log = logging.getLogger(__name__)


@dataclass
class LoadTestResult:
    """A load test's outputs: the server's facts, every burst, every request, the metrics samples."""

    facts: Json
    measurements: list[Burst]
    records: list[Json]
    metric_rows: list[Json]

    def to_json(self) -> Json:
        return self.facts

    def files(self) -> dict[str, Json | list[Json]]:
        return {
            "facts.json": self.facts,
            "measurements.jsonl": [b.to_json() for b in self.measurements],
            "records.jsonl": self.records,
            "metrics.jsonl": self.metric_rows,
        }


class LoadTest(JobKind):
    name = "loadtest"
    folder = "servers"
    files: ClassVar[tuple[str, ...]] = ("facts.json", "measurements.jsonl", "records.jsonl", "metrics.jsonl")

    @classmethod
    def from_json(cls, text: str | None = None) -> LoadTest:
        return cls()

    def not_run(self, job: ServerJob, reason: str) -> dict[str, Json | list[Json]]:
        return {**super().not_run(job, reason), "facts.json": not_run_facts(job, reason)}

    def run(self, session: ServerSession) -> LoadTestResult:
        """Every start of the server in turn (a fresh process each time, so the spread over cycles includes how
        much one start differs from the next), its share of the cycles measured on each."""
        job = session.job
        m: Measurer | None = None
        t_job = time.monotonic()
        busy = gpu_busy_for(session.lease.device)  # None on a CPU-only machine
        until = cycles_per_start(job_targets(job), job.server_starts)
        with GpuTelemetry(session.lease.device, cpus=session.cpus.server) as telemetry:  # inactive without a GPU
            for k in range(job.server_starts):
                with session.serving() as srv:
                    assert srv.proc is not None
                    m, probes = asyncio.run(self._measure(session, srv.base_url, srv.proc, m, k, until[k], telemetry,
                                                          busy))  # fmt: skip
                    session.facts["probes"] = probes
        assert m is not None
        total = time.monotonic() - t_job
        ready = session.readiness
        timing = {
            "readiness_s": sum(ready),
            **m.timing,
            "probes_s": total - sum(ready) - sum(m.timing.values()) - session.stop_s,
            "stop_s": session.stop_s,
            "total_s": total,
        }
        return job_result(session, m, timing)

    @staticmethod
    async def _measure(
        session: ServerSession,
        base_url: str,
        proc: Any,
        m: Measurer | None,
        instance: int,
        until_cycle: int | None,
        telemetry: GpuTelemetry | None,
        busy: Any,
    ) -> tuple[Measurer, dict[str, Any]]:
        """Measure on one server start; ``m`` carries what earlier starts of the same job measured."""
        async with session.client(client_connections(session.job)) as http:
            if m is None:
                m = Measurer(session.job, session.engine, session.spec, base_url, session.rset, http)
            m.session, m.base_url, m.server_exit, m.instance = http, base_url, proc.poll, instance
            m.telemetry, m.host, m.busy = telemetry, HostTelemetry(proc.pid), busy
            probes = await m.run(until_cycle)
        return m, probes


def job_result(session: ServerSession, m: Measurer, timing: dict[str, float]) -> LoadTestResult:
    """A server job's files once its server is stopped (a job of its own or a group's member): the facts completed
    with each start's readiness, the job's ``timing``, the requests per adapter, the GPU memory left after the stop
    and what the server's log says."""
    facts = session.facts
    facts["readiness_s"] = session.readiness[0]
    facts["readiness_starts_s"] = session.readiness
    facts["timing"] = timing
    facts["per_adapter"] = per_adapter(m.records)
    facts["gpu_memory_after_stop_mib"] = gpu_memory()
    facts["log"] = session.parse_log()
    if facts["log"].get("engine_version") and not facts["engine_version"]:
        facts["engine_version"] = facts["log"]["engine_version"]
    return LoadTestResult(facts, m.measurements, m.records, m.metric_rows)
