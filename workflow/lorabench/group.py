"""The group load test: one job owns a co-resident group of servers (``groups:`` in the config, checked by
``groups.check_groups``). It starts every member in the group's order (each its own port, log and facts; each
waited ready before the next starts, since SGLang's memory fraction counts what the servers before it hold), warms
every cell of every member, then measures cycles in which one cycle holds one burst of every cell of every member,
in a random order drawn per cycle (``cycles.cycle_order`` over the group's cells, seeded by the workload's seed;
each cycle's order is in ``group.json``), one burst at a time. Any failure stops every member started so far.

The loop is the load test's (``cycles.run_cycles`` with each cell naming its server, ``Measurer.cycle_burst`` per
member), so cells of different members share cycle numbers and a comparison between two members pairs the bursts
of one cycle (``stats.paired_ratios``, rows of one group). Each member's files are those a server job writes
(``loadtest.LoadTest.files``), under ``results/groups/GROUP/servers/SERVER/``; the rule ``group_member`` puts them
where a server job's go, so the summary and the report read them unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import device
from .device import DeviceLease
from .engines import all_server_markers, get_engine
from .harness import CpuPlan
from .job import JobInputs, ServerJob
from .jobs import JobFiles, Json, write_files, write_not_run
from .loadgen.client import make_session
from .loadtest import LoadTest, LoadTestResult, job_result
from .measure.cycles import Cell, Progress, Targets, run_cycles
from .measure.measurer import Measurer, cell_id, client_connections, job_targets
from .nvml import gpu_busy_for
from .resources import GpuTelemetry, HostTelemetry, gpu_memory
from .server import ManagedServer, study_api_key, terminate_on_signals
from .session import ServerSession, job_cpus, job_hardware, read_request_set

log = logging.getLogger(__name__)
GROUP_SCHEMA = "lorabench.group/1"


@dataclass
class GroupJob:
    """A group's job: its id, each member's server job, in the order the group starts them, and on a GPU each
    member's own share of the device's memory (``groups.memory_shares``; {} for CPU engines)."""

    group: str
    jobs: list[ServerJob]
    shares: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"group": self.group, "servers": [json.loads(j.to_json()) for j in self.jobs],
                           "shares": self.shares}, sort_keys=True)  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> GroupJob:
        d = json.loads(text)
        return cls(d["group"], [ServerJob.from_dict(s) for s in d["servers"]], d.get("shares") or {})

    @property
    def servers(self) -> list[str]:
        return [j.server_id for j in self.jobs]


def group_progress(jobs: list[ServerJob]) -> Progress:
    """The group's cycles as one ``Progress``: every member's conditions qualified by the server (``Cell.tracked``),
    each compared with its own server's reference condition, so the stop rule is every member's own; and each
    member's reference condition compared with the same condition on the first member that has it, so the stop rule
    also waits for the comparisons between servers (summary.server_comparisons) of the reference cells."""
    conditions, references = [], {}
    first: dict[str, str] = {}  # a reference condition -> the first member measuring it
    for j in jobs:
        own = j.reference or j.conditions[0]
        ref = f"{j.server_id}:{own}"
        for c in j.conditions:
            q = f"{j.server_id}:{c}"
            conditions.append(q)
            references[q] = f"{j.server_id}:{j.references[c]}" if c in j.references else ref
        if own in first:
            references[ref] = f"{first[own]}:{own}"
        first.setdefault(own, j.server_id)
    bursts = sorted({b for j in jobs for b in j.bursts})
    return Progress(references[conditions[0]], conditions, bursts, references)


def group_targets(jobs: list[ServerJob]) -> Targets:
    """The first member's stop rule (the settings are the study's, the same for every member), without focused
    cycles (a group's cycles hold every cell of every member), and with every member's own ``max_measuring_s``
    added up: each cycle holds each member's bursts, so each member gets about the time a job of its own would."""
    return dataclasses.replace(
        job_targets(jobs[0]), focus=False, max_measuring_s=sum(job_targets(j).max_measuring_s for j in jobs)
    )


@dataclass
class Member:
    """One member of a running group: its session (files, facts, starts), its server and its measurer."""

    session: ServerSession
    server: ManagedServer
    measurer: Measurer | None = None
    probes_s: float = 0.0  # its probes after the group's cycles


class GroupCycles:
    """The group's ``cycles.BurstFn``: each burst sent to its member's measurer, with the member's own place in
    the cycle (for its per-cycle host telemetry) and the group's; each cycle's order kept."""

    def __init__(self, members: dict[str, Member], cells: list[Cell], progress: Progress) -> None:
        self.members = members
        self.progress = progress  # the group's cycles so far (group_progress)
        self.per_server = {s: sum(1 for c in cells if c.server == s) for s in members}
        self.orders: dict[int, list[str]] = {}
        self._seen: dict[str, int] = {}

    async def __call__(self, cell: Cell, cycle: int, position: int, length: int) -> tuple[float, float]:
        if position == 0:
            self._seen = {}
        self.orders.setdefault(cycle, []).append(f"{cell.server}:{cell_id(cell)}")
        k = self._seen.get(cell.server, 0)
        self._seen[cell.server] = k + 1
        m = self.members[cell.server].measurer
        assert m is not None
        own = dataclasses.replace(cell, server="")
        return await m.cycle_burst(own, cycle, k, self.per_server[cell.server], group_position=position)


def member_session(
    job: ServerJob, inputs: JobInputs, out: Path, host: str, cpus: CpuPlan, lease: DeviceLease, key: str
) -> ServerSession:
    """A member's session (``session.ServerSession.open``'s checks and folder, the group's device and CPUs)."""
    engine = get_engine(inputs.spec.engine)
    engine.check(inputs.spec)
    rset = read_request_set(job, inputs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "server.log.partial").unlink(missing_ok=True)
    return ServerSession(job, inputs, engine, rset, out, host, cpus, lease, key)


async def measure_group(group: GroupJob, members: dict[str, Member], telemetry: GpuTelemetry, busy: Any) -> GroupCycles:
    """Canary and warm-up of every member, the group's cycles, then every member's probes."""
    connections = max(client_connections(j) for j in group.jobs)
    first = next(iter(members.values())).session
    async with make_session(connections, first.api_key) as http:
        for m in members.values():
            s, srv = m.session, m.server
            assert srv.proc is not None
            m.measurer = Measurer(s.job, s.engine, s.spec, srv.base_url, s.rset, http, group=group.group)
            m.measurer.server_exit, m.measurer.telemetry, m.measurer.busy = srv.proc.poll, telemetry, busy
            m.measurer.host = HostTelemetry(srv.proc.pid)
        checked = {sid: await m.measurer.prepare() for sid, m in members.items() if m.measurer is not None}
        cells = [
            dataclasses.replace(c, server=sid) for sid, m in members.items() if m.measurer for c in m.measurer.cells()
        ]
        burst = GroupCycles(members, cells, group_progress(group.jobs))
        progress = burst.progress
        jobs = group.jobs
        await run_cycles(
            burst, cells, progress, group_targets(jobs), 0, None, jobs[0].stream, seed=jobs[0].shuffle_seed
        )
        for sid, m in members.items():
            assert m.measurer is not None
            m.measurer.progress.cycles = progress.cycles
            m.measurer.progress.stop_reason = f"group {group.group}: {progress.stop_reason}"
            m.measurer.progress.measuring_s = m.measurer.timing["measuring_s"]
            t0 = time.monotonic()
            probes = await m.measurer.probes(checked.get(sid))
            m.probes_s = time.monotonic() - t0
            probes["cycles"]["group"] = {"group": group.group, "servers": group.servers,
                                         "measuring_s": round(progress.measuring_s, 2)}  # fmt: skip
            m.session.facts["probes"] = probes
    return burst


def member_result(m: Member, group: GroupJob, started: float) -> LoadTestResult:
    """A member's files, as a server job's (``loadtest.LoadTest``), its facts naming its group and the group's
    members in start order (``summary.server_comparisons`` reads them)."""
    s, meas = m.session, m.measurer
    assert meas is not None
    facts = s.facts
    facts["config"]["group"] = group.group
    facts["config"]["group_servers"] = group.servers
    timing = {"readiness_s": sum(s.readiness), **meas.timing, "probes_s": m.probes_s, "stop_s": s.stop_s,
              "total_s": time.monotonic() - started}  # fmt: skip
    return job_result(s, meas, timing)


# What a server needs beyond its weights within its share, at the least: CUDA context, activations of the memory
# profile, CUDA graphs and some KV cache (vLLM's own profile on the 8B shape: 2-4 GiB of the share).
MIN_BEYOND_WEIGHTS_MIB = 3072


def weights_mib(model_path: str) -> float:
    """The model's weight files on disk (safetensors), in MiB: what each server loads onto the GPU."""
    return sum(f.stat().st_size for f in Path(model_path).glob("*.safetensors")) / 2**20


def fit_problems(group: GroupJob, total_mib: float, used_mib: float, weights: float) -> list[str]:
    """Why the group cannot fit the GPU, before any member starts (empty: it fits): the shares together above
    what is free now (other processes hold ``used_mib``), or a member's share too small for the weights and
    MIN_BEYOND_WEIGHTS_MIB beside them."""
    if not group.shares:
        return []
    problems = []
    asked = sum(group.shares.values()) * total_mib
    if asked > total_mib - used_mib:
        problems.append(f"the members' shares ({', '.join(f'{s} {v:g}' for s, v in group.shares.items())}) ask for "
                        f"{asked:.0f} MiB of the GPU's {total_mib:.0f}, but other processes hold {used_mib:.0f} MiB: "
                        f"{total_mib - used_mib:.0f} MiB are free")  # fmt: skip
    for sid, share in group.shares.items():
        if share * total_mib < weights + MIN_BEYOND_WEIGHTS_MIB:
            problems.append(f"{sid}: a share of {share:g} is {share * total_mib:.0f} MiB, less than its weights "
                            f"({weights:.0f} MiB) and {MIN_BEYOND_WEIGHTS_MIB} MiB beside them (context, activations, "
                            f"graphs, KV cache); give it at least "
                            f"{(weights + MIN_BEYOND_WEIGHTS_MIB) / total_mib:.2f}")  # fmt: skip
    return problems


def check_fit(group: GroupJob, read: dict[str, JobInputs], device: str) -> None:
    """``fit_problems`` on this machine's GPU (nvidia-smi's used and total memory of the leased device): a
    RuntimeError naming the servers and the numbers, before any server starts."""
    rows = gpu_memory() if group.shares else None
    row = next((r for r in rows or [] if str(r["index"]) == device), None)
    if row is None:
        return
    weights = max(weights_mib(i.spec.model_path) for i in read.values())
    problems = fit_problems(group, row["total_mib"], row["used_mib"], weights)
    if problems:
        raise RuntimeError(f"group {group.group} does not fit {row['name']} ({row['total_mib']} MiB); nothing "
                           "started:\n  " + "\n  ".join(problems))  # fmt: skip


def run_group(group: GroupJob, inputs: dict[str, JobInputs | JobFiles], out_dir: Path, host: str = "127.0.0.1") -> Json:
    """The group's job end to end (the module's docstring); returns ``group.json``'s content. Where its engines
    cannot run here, every member's files say so (``jobs.write_not_run``), as a server job's would."""
    out_dir.mkdir(parents=True, exist_ok=True)
    kind = LoadTest()
    if not all(j.runnable for j in group.jobs):
        for j in group.jobs:
            write_not_run(kind, j, out_dir / "servers" / j.server_id, reason="not run: needs a GPU")
        head: Json = {
            "schema": GROUP_SCHEMA,
            "group": group.group,
            "servers": group.servers,
            "status": "not run: needs a GPU",
        }
        (out_dir / "group.json").write_text(json.dumps(head, indent=1))
        return head
    read = {j.server_id: (i.read(j) if isinstance(i := inputs[j.server_id], JobFiles) else i) for j in group.jobs}
    started = time.monotonic()
    cpus = job_cpus(group.jobs[0])
    key = study_api_key(out_dir.parents[1])  # results/groups/GROUP -> results
    hardware = job_hardware(group.jobs[0])
    with terminate_on_signals(), device.acquire(hardware, all_server_markers(), f"group-{group.group}") as lease:
        check_fit(group, read, lease.device)
        sessions = {j.server_id: member_session(j, read[j.server_id], out_dir / "servers" / j.server_id, host, cpus,
                                                lease, key) for j in group.jobs}  # fmt: skip
        with GpuTelemetry(lease.device, cpus=cpus.server) as telemetry, contextlib.ExitStack() as stack:
            members: dict[str, Member] = {}
            for sid, s in sessions.items():  # in the group's order, each ready before the next starts
                members[sid] = Member(s, stack.enter_context(s.serving()))
                log.info("group %s: %s ready after %.1f s (%d of %d)", group.group, sid, s.readiness[0], len(members),
                         len(sessions))  # fmt: skip
            cycles = asyncio.run(measure_group(group, members, telemetry, gpu_busy_for(lease.device)))
        # every member stopped here (the stack), on success as on any failure
    results = {sid: member_result(m, group, started) for sid, m in members.items()}
    progress = cycles.progress
    summary: Json = {
        "schema": GROUP_SCHEMA,
        "group": group.group,
        "servers": group.servers,
        "status": "ok",
        "cycles": progress.cycles,
        "stop_reason": progress.stop_reason,
        "measuring_s": round(progress.measuring_s, 2),
        "order": "random per cycle",
        "order_seed": group.jobs[0].shuffle_seed,
        "orders": [cycles.orders[c] for c in sorted(cycles.orders)],
        "readiness_s": {sid: s.readiness[0] for sid, s in sessions.items()},
        "total_s": round(time.monotonic() - started, 2),
    }
    for sid, r in results.items():
        write_files(out_dir / "servers" / sid, r.files())
        sessions[sid].finish()
    (out_dir / "group.json").write_text(json.dumps(summary, indent=1))
    return summary
