"""The load test's measuring on a ready server (method v2): the canary, the warm-up, the cycles of bursts
(``cycles``: the loop and its stop rule; ``Measurer.cycle_burst`` runs one burst), the probes, and where the time
went. Each burst becomes one ``burst.Burst`` row and one row per request; nothing here starts or stops a server.
Each row also records what came before it on the server (``slot_state``: the burst sent just before it and the
adapters inferred resident in the slots when it started), kept by one ``SlotHistory`` reset at every server start.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ..engines import Engine, ServerSpec
from ..harness import quiet_gc
from ..job import ServerJob
from ..loadgen.client import CompletionRequest, RequestRecord, run_burst, run_concurrency
from ..loadgen.workload import request_shapes, set_key
from ..metrics import METRICS_CONNECTIONS, MetricsSampler, summarize_samples
from ..nvml import GpuBusy
from ..resources import GpuTelemetry, HostTelemetry, cpu_share, cpu_ticks, gpu_memory
from ..server import ServerStartError
from .burst import Burst, BurstFigures, median_ms, pct_ms
from .cycles import Cell, Progress, Targets, cycle_cells, run_cycles
from .probes import canary, probe_server
from .slot_state import SlotHistory, SlotState

log = logging.getLogger(__name__)


def client_connections(job: ServerJob) -> int:
    """Connections of the load test's HTTP client: every request of its largest burst at once, and the metrics
    sampler's beside them, so that a scrape taken while a burst is in flight is not queued behind it."""
    return max(job.bursts) + METRICS_CONNECTIONS


def requests_of(
    engine: Engine,
    spec: ServerSpec,
    rset: dict[str, Any],
    adapters: list[str],
    tag: str,
    ids: list[str] | None = None,
    shapes: list[tuple[str, int]] | None = None,
) -> list[CompletionRequest]:
    """Requests, one per entry of ``adapters``, named for the server: each with its (prompt, max_tokens) of
    ``shapes`` where given (workload.request_shapes), else the request set's one prompt and length."""
    ids = ids or [str(i) for i in range(len(adapters))]
    shapes = shapes or [(str(rset["prompt"]), int(rset["max_tokens"]))] * len(adapters)
    return [
        CompletionRequest(
            request_id=f"{spec.server_id}/{tag}/{rid}",
            adapter=a,
            model=engine.request_model(spec, a),
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=float(rset["temperature"]),
            ignore_eos=bool(rset["ignore_eos"]),
        )
        for a, rid, (prompt, max_tokens) in zip(adapters, ids, shapes, strict=True)
    ]


def cell_adapters(rset: dict[str, Any], cell: Cell) -> list[str]:
    """The adapters of one burst of a cell, in request order ("base" for the base model)."""
    return [r["adapter"] for r in rset["sets"][set_key(cell.condition, cell.burst)]]


def adapter_slots(engine: Engine, spec: ServerSpec) -> int | None:
    """The server's adapter slots: 0 with LoRA off, else its max_loras or the engine's default (None: unknown)."""
    if not spec.lora:
        return 0
    return spec.max_loras if spec.max_loras is not None else engine.default_max_loras


def requests_for(
    engine: Engine, spec: ServerSpec, rset: dict[str, Any], cell: Cell, tag: str
) -> list[CompletionRequest]:
    """The request set's requests of one cell, streamed or not as the cell says."""
    rows = rset["sets"][set_key(cell.condition, cell.burst)]
    adapters, ids = [r["adapter"] for r in rows], [r["request_id"] for r in rows]
    reqs = requests_of(engine, spec, rset, adapters, tag, ids, request_shapes(rset, rows))
    return reqs if cell.stream else [dataclasses.replace(r, stream=False) for r in reqs]


def cell_id(cell: Cell) -> str:
    """``CONDITION/BURST/s`` (streamed) or ``.../n`` (not): a cell's name in measurement ids and logs."""
    return f"{cell.condition}/{cell.burst}/{'s' if cell.stream else 'n'}"


async def send(
    session: aiohttp.ClientSession, base_url: str, reqs: list[CompletionRequest], job: ServerJob
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


def job_targets(job: ServerJob) -> Targets:
    """When a job's cycles stop (``cycles.Targets``) from its settings."""
    return Targets(
        min_cycles=job.repetitions,
        max_cycles=job.max_repetitions,  # at least ``repetitions`` (ServerJob.__post_init__)
        target_points=job.target_points,
        target_ci_pct=job.target_ci_pct,
        max_measuring_s=job.max_measuring_s,
        focus=job.focus_cycles,
    )


def per_adapter(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per condition, burst and adapter, from the measured (non-warm-up) requests: how many, their TTFT, ITL and
    end-to-end medians and p90, pooled over the requests of every burst (``*_pooled_ms``: not the median over
    bursts of each burst's figure, as a cell's are). Within one mix, this shows whether one adapter waits for another
    (slot deferral)."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in records:
        if r.get("warmup") or r.get("error"):
            continue
        groups.setdefault((r["condition"], int(r["burst"]), r["adapter"]), []).append(r)
    out = []
    for (cond, burst, adapter), rs in sorted(groups.items()):
        itl = [x for r in rs for x in r.get("itl_s") or []]
        out.append(
            {
                "condition": cond,
                "burst": burst,
                "adapter": adapter,
                "requests": len(rs),
                "ttft_median_pooled_ms": median_ms([r["ttft_s"] for r in rs]),
                "ttft_p90_pooled_ms": pct_ms([r["ttft_s"] for r in rs], 90),
                "itl_median_pooled_ms": median_ms(itl),
                "latency_median_pooled_ms": median_ms([r["latency_s"] for r in rs]),
                "latency_p90_pooled_ms": pct_ms([r["latency_s"] for r in rs], 90),
            }
        )
    return out


@dataclass
class Measurer:
    """The measuring part of a load test, on a ready server (the module's docstring). One object lives through
    every server start of the job: what earlier starts measured stays in it."""

    job: ServerJob
    engine: Engine
    spec: ServerSpec
    base_url: str
    rset: dict[str, Any]
    session: aiohttp.ClientSession
    records: list[dict[str, Any]] = field(default_factory=list)
    measurements: list[Burst] = field(default_factory=list)
    metric_rows: list[dict[str, Any]] = field(default_factory=list)
    gpu_peak: dict[int, int] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=lambda: {"warmup_s": 0.0, "measuring_s": 0.0, "between_s": 0.0})
    server_exit: Callable[[], int | None] = lambda: None  # the server's exit code once it has died
    instance: int = 0  # which of the job's server starts is serving (see ServerJob.server_starts)
    telemetry: GpuTelemetry | None = None  # the GPU's clocks and power, summarised per burst
    host: HostTelemetry | None = None  # the host's, the engine's and its front end's CPU time, per burst
    busy: GpuBusy | None = None  # the GPU's busy share per burst (NVML)
    progress: Progress = field(init=False)  # the cycles so far, over every server start of the job
    order: int = 0  # measured bursts so far: each burst's place in the job's order
    _cycle_start: dict[str, Any] | None = None  # the host's counters at the start of the cycle under way
    _cycle_rows: list[Burst] = field(default_factory=list)  # the bursts of the cycle under way
    slots: SlotHistory = field(init=False)  # the bursts sent on the server start now serving (slot_state)
    group: str | None = None  # the co-resident group measuring this server with others (lorabench.group)

    def __post_init__(self) -> None:
        job = self.job
        self.progress = Progress(
            job.reference or job.conditions[0], list(job.conditions), list(job.bursts), dict(job.references)
        )
        self.slots = SlotHistory(adapter_slots(self.engine, self.spec))

    def _check_server(self, where: str) -> None:
        code = self.server_exit()
        if code is not None:
            raise ServerStartError(
                f"{self.spec.server_id}: the server exited with code {code} during {where}; nothing of this job is kept"
            )

    def _sampler(self) -> MetricsSampler:
        return MetricsSampler(
            self.session,
            self.base_url + self.engine.metrics_path,
            self.engine.metric_prefixes,
            self.job.metrics_interval_s,
        )

    async def one_burst(self, cell: Cell, tag: str, metrics: str) -> tuple[list[RequestRecord], list[dict[str, Any]]]:
        """One burst of a cell, with the garbage collector quiet throughout and metrics scraped as ``metrics``
        says (``during``: while in flight; ``between``: once, after it). The caller records it in ``slots``."""
        sampler = self._sampler()
        with quiet_gc(self.job.harness["gc"]):
            if metrics == "during":
                sampler.start()
            reqs = requests_for(self.engine, self.spec, self.rset, cell, tag)
            recs = await send(self.session, self.base_url, reqs, self.job)
            if metrics == "between":
                await sampler.scrape_once()
            samples = await sampler.stop()
        return recs, samples

    async def warm_up(self, cells: list[Cell]) -> None:
        """Every cell, recorded, flagged, excluded from statistics; scraped while in flight, so queue depths are
        seen for every condition whatever the measurements do. A fresh server: the slot history starts here."""
        t0 = time.monotonic()
        self.slots.reset()
        for cell in cells:
            for w in range(self.job.warmup_bursts):
                mid = f"warmup/{cell_id(cell)}/{w}" + (f"/start{self.instance}" if self.instance else "")
                metrics = "off" if self.job.harness["metrics"] == "off" else "during"
                adapters = cell_adapters(self.rset, cell)
                state = self.slots.before(adapters)
                recs, samples = await self.one_burst(cell, f"warmup{w}", metrics)
                self.slots.after(cell_id(cell), mid, adapters)
                b = self._keep(recs, samples, self._burst(cell, -1 - w, -1, True, mid, recs, slot_state=state))
                log.info("warm-up %-24s: %8.1f tok/s, %d errors", cell_id(cell), b.figures.throughput_tok_s,
                         b.figures.n_errors)  # fmt: skip
        self.timing["warmup_s"] += time.monotonic() - t0

    def _burst(
        self,
        cell: Cell,
        rep: int,
        order: int,
        warmup: bool,
        mid: str,
        recs: list[RequestRecord],
        cycle: int | None = None,
        position: int | None = None,
        slot_state: SlotState | None = None,
        group_position: int | None = None,
    ) -> Burst:
        return Burst(
            server=self.spec.server_id,
            condition=cell.condition,
            burst=cell.burst,
            stream=cell.stream,
            rep=rep,
            order=order,
            warmup=warmup,
            measurement_id=mid,
            server_start=self.instance,
            figures=BurstFigures.of([recs], self.job.outlier_fraction),
            cycle=cycle,
            position=position,
            slot_state=slot_state,
            group=self.group if cycle is not None else None,
            group_position=group_position,
        )

    def _keep(self, recs: list[RequestRecord], samples: list[dict[str, Any]], b: Burst) -> Burst:
        b.metrics = summarize_samples(samples, self.engine)
        self.measurements.append(b)
        ident = b.identity()
        self.records += [{**r.to_row(), **ident, "burst_index": 0} for r in recs]
        self.metric_rows += [{**s, "measurement_id": b.measurement_id} for s in samples]
        return b

    async def cycle_burst(
        self, cell: Cell, cycle: int, position: int, length: int, group_position: int | None = None
    ) -> tuple[float, float]:
        """One measured burst of a cycle (``cycles.BurstFn``): the burst, then what it cost the engine's HTTP front
        end (its share of one CPU) and the GPU's busy share over it (NVML) and clocks; the host's state (engine
        threads, stolen time, the CPU probe) is read once a cycle, over the whole cycle, and given to each of its
        bursts, so the work between bursts stays small. In a group's cycles ``position`` and ``length`` are this
        server's (its bursts of the cycle) and ``group_position`` the burst's place among every member's. Returns the
        burst's throughput and wall time."""
        mid = f"{cell_id(cell)}/{cycle}"
        t0, w0 = time.monotonic(), time.time()
        if position == 0 and self.host is not None:
            self._cycle_start = self.host.snapshot()
            self._cycle_rows = []
        adapters = cell_adapters(self.rset, cell)
        state = self.slots.before(adapters)
        fe0 = self._front_end_ticks()
        recs, samples = await self.one_burst(cell, mid, self.job.harness["metrics"])
        w1 = time.time()
        fe1 = self._front_end_ticks()
        self.slots.after(cell_id(cell), mid, adapters)
        self._check_server(f"burst {mid}")
        row = self._burst(cell, cycle, self.order, False, mid, recs, cycle=cycle, position=position, slot_state=state,
                          group_position=group_position)  # fmt: skip
        b = self._keep(recs, samples, row)
        self.order += 1
        share = cpu_share(fe0, fe1, w1 - w0)
        if share is not None:
            b.metrics["front_end_cpu"] = share
        if self.telemetry is not None:
            b.metrics.update(self.telemetry.window(w0, w1))
        if self.busy is not None:
            b.metrics["gpu_busy_pct"] = self.busy.share(w0, w1)
        self._cycle_rows.append(b)
        if position == length - 1 and self.host is not None and self._cycle_start is not None:
            host = self.host.window(self._cycle_start, self.host.snapshot())
            for r in self._cycle_rows:
                r.metrics.update(host)
            for g in gpu_memory() or []:  # between bursts, once a cycle
                self.gpu_peak[g["index"]] = max(self.gpu_peak.get(g["index"], 0), g["used_mib"])
        burst_s = b.figures.burst_s
        self.timing["measuring_s"] += burst_s
        self.timing["between_s"] += time.monotonic() - t0 - burst_s
        return (b.figures.throughput_tok_s if b.ok else float("nan")), burst_s

    def _front_end_ticks(self) -> int | None:
        """CPU ticks (user + system, all threads) of the server's group leader: the engine's HTTP front end."""
        return cpu_ticks(self.host.pgid) if self.host is not None and self.host.pgid else None

    async def prepare(self) -> dict[str, Any] | None:
        """Before the cycles of a server start: the canary (each adapter loaded at start changes the output; None
        without adapters), then the warm-up of every cell."""
        checked = None
        if self.spec.lora and self.spec.adapters:
            checked = await canary(self.session, self.base_url, self.engine, self.spec, sorted(self.spec.adapters))
            log.info("canary: every adapter changes the output (%s)", ", ".join(sorted(self.spec.adapters)))
        await self.warm_up(self.cells())
        return checked

    def cells(self) -> list[Cell]:
        """The server's cells (``cycles.cycle_cells``)."""
        return cycle_cells(self.job.conditions, self.job.bursts, self.job.stream)

    async def probes(self, checked: dict[str, Any] | None) -> dict[str, Any]:
        """After the cycles: the server's probes, its GPU memory peak, the canary, and how its cycles went."""
        job = self.job
        probes = await probe_server(self.session, self.base_url, self.engine, self.spec)
        probes["gpu_memory_peak_mib"] = self.gpu_peak or None
        probes["canary"] = checked
        probes["cycles"] = {"cycles": self.progress.cycles, "stop_reason": self.progress.stop_reason,
                            "measuring_s": round(self.progress.measuring_s, 2),
                            "focused_from": self.progress.focused_from or None,
                            "order": "random per cycle", "order_seed": job.shuffle_seed}  # fmt: skip
        return probes

    async def run(self, until_cycle: int | None) -> dict[str, Any]:
        """Measure on the server now serving (start ``self.instance``): the canary, the warm-up, then cycles
        until ``until_cycle`` (an earlier start's share) or, on the last start, until the stop rule says so."""
        job = self.job
        checked = await self.prepare()
        await run_cycles(self.cycle_burst, self.cells(), self.progress, job_targets(job), self.instance, until_cycle,
                         job.stream, seed=job.shuffle_seed)  # fmt: skip
        return await self.probes(checked)
