"""One server job: start the server, wait ready, warm up, run every measurement in shuffled order, probe,
collect logs and metrics, always stop.

The job arrives as one ``ServerJob`` (lorabench.job: the rule's params) with its input files read
(``JobInputs``); the same can be written to JSON and run with ``lorabench job loadtest SPEC.json`` on a machine
without Snakemake (a GPU box). Outputs are written only after the server has stopped and everything succeeded, each
file atomically, so an interrupted job never leaves results that look complete.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import statistics
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from . import device
from .device import DeviceLease
from .engines import Engine, ServerSpec, all_server_markers, get_engine
from .engines.base import models_listed_ok
from .harness import CpuPlan, confine_group, pin_self, plan_cpus, quiet_gc
from .io import read_json, write_json, write_jsonl
from .job import JobInputs, ServerJob, read_inputs
from .loadgen.client import CompletionRequest, RequestRecord, make_session, run_burst, run_concurrency
from .loadgen.workload import request_shapes, set_key
from .measure.cycles import Cell, Progress, Targets, cycle_cells, cycles_per_start, run_cycles
from .median import outliers_below
from .metrics import MetricsSampler, summarize_samples
from .nvml import GpuBusy, gpu_busy_for
from .resources import GpuTelemetry, HostTelemetry, cpu_ticks, gpu_memory, group_rss_mib, machine_facts
from .server import ManagedServer, ServerStartError, free_port, study_api_key, terminate_on_signals

log = logging.getLogger(__name__)

# Every row of measurements.jsonl is one burst (method v2): its cell, cycle and place in the cycle, its figures.
BURST_SCHEMA = "lorabench.burst/2"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


def _requests_for(
    engine: Engine, spec: ServerSpec, rset: dict[str, Any], cell: Cell, tag: str
) -> list[CompletionRequest]:
    rows = rset["sets"][set_key(cell.condition, cell.burst)]
    adapters, ids = [r["adapter"] for r in rows], [r["request_id"] for r in rows]
    reqs = requests_of(engine, spec, rset, adapters, tag, ids, request_shapes(rset, rows))
    return reqs if cell.stream else [dataclasses.replace(r, stream=False) for r in reqs]


def cell_id(cell: Cell) -> str:
    """``CONDITION/BURST/s`` (streamed) or ``.../n`` (not): a cell's name in measurement ids and logs."""
    return f"{cell.condition}/{cell.burst}/{'s' if cell.stream else 'n'}"


def _median_ms(values: list[float]) -> float:
    return _pct_ms(values, 50)


def _pct_ms(values: list[float], q: float) -> float:
    """The q-th percentile (0-100, linear between order statistics, as numpy's default) in milliseconds."""
    vals = sorted(v for v in values if v is not None and not math.isnan(v))
    if not vals:
        return float("nan")
    pos = (len(vals) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return 1000.0 * (vals[lo] + (vals[hi] - vals[lo]) * (pos - lo))


def _burst_figures(recs: list[RequestRecord]) -> tuple[float, int, float]:
    """(wall time, completed tokens, throughput) of one burst: first request start to last request end."""
    wall = max(r.end_s for r in recs) - min(r.start_s for r in recs)
    tokens = sum(r.completion_tokens for r in recs if r.ok)
    return wall, tokens, tokens / wall if wall > 0 else float("nan")


def measurement_row(
    bursts: list[list[RequestRecord]] | list[RequestRecord], base: dict[str, Any], outlier_fraction: float = 0.75
) -> dict[str, Any]:
    """Aggregate one measurement: one or more consecutive bursts (a flat list of records is one burst).

    ``throughput_tok_s`` is the median of the bursts' own throughputs (tokens of the burst / its wall time), so
    one stalled burst cannot move it; ``throughput_total_tok_s`` is the source study's definition, all tokens
    over the bursts' summed wall time (the gaps between bursts, where the harness scrapes metrics, are not
    counted). Bursts slower than ``outlier_fraction`` x the median burst are counted in ``outlier_bursts``,
    never dropped. Throughput counts completed requests' tokens only; a measurement with any error is marked,
    never silently averaged."""
    groups: list[list[RequestRecord]] = (
        [list(bursts)] if bursts and isinstance(bursts[0], RequestRecord) else [list(b) for b in bursts]  # type: ignore[arg-type]
    )
    records = [r for g in groups for r in g]
    ok = [r for r in records if r.ok]
    figures = [_burst_figures(g) for g in groups if g]
    walls = [f[0] for f in figures]
    burst_tps = [f[2] for f in figures]
    tokens = sum(r.completion_tokens for r in ok)
    itl = [x for r in ok for x in r.itl_s]
    errors = [r.error for r in records if not r.ok]
    burst_s = sum(walls)
    return {
        **base,
        "n_requests": len(records),
        "n_ok": len(ok),
        "n_errors": len(errors),
        "errors": sorted(set(errors))[:5],
        "completion_tokens": tokens,
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "duration_s": max(r.end_s for r in records) - min(r.start_s for r in records),
        "burst_s": burst_s,
        "n_bursts": len(groups),
        "burst_tok_s": [round(v, 3) for v in burst_tps],
        "outlier_bursts": len(outliers_below(burst_tps, outlier_fraction)),
        "throughput_tok_s": statistics.median(burst_tps) if burst_tps else float("nan"),
        "throughput_total_tok_s": tokens / burst_s if burst_s > 0 else float("nan"),
        "ttft_median_ms": _median_ms([r.ttft_s for r in ok]),
        "itl_median_ms": _median_ms(itl),
        "latency_median_ms": _median_ms([r.latency_s for r in ok]),
        **{
            f"{name}_p{q}_ms": _pct_ms(vals, q)
            for name, vals in (("ttft", [r.ttft_s for r in ok]), ("itl", itl), ("latency", [r.latency_s for r in ok]))
            for q in (50, 90, 99)
        },
        "wall_start": min(r.wall_start for r in records),
    }


async def served_models(session: aiohttp.ClientSession, base_url: str) -> list[str]:
    """The model names the server lists (``/v1/models``), sorted."""
    async with session.get(base_url + "/v1/models") as r:
        return sorted(m["id"] for m in (await r.json(content_type=None)).get("data", []))


async def _probe(session: aiohttp.ClientSession, base_url: str, engine: Engine, spec: ServerSpec) -> dict[str, Any]:
    """Operational checks a user relies on: served names are listed; a wrong model name is refused."""
    out: dict[str, Any] = {}
    out["models_listed"] = await served_models(session, base_url)
    expected = sorted({spec.served_name, *(engine.request_model(spec, a) for a in spec.adapters)})
    out["models_expected"] = expected  # the names requests use
    out["models_listed_ok"] = models_listed_ok(out, list(spec.adapters))
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
    if session.headers.get("Authorization"):
        async with aiohttp.ClientSession() as anon:  # the same request without the server's key
            good = CompletionRequest("probe/no-key", "base", engine.request_model(spec, "base"), "hello", 4).payload()
            good["stream"] = False
            good.pop("stream_options", None)
            async with anon.post(base_url + "/v1/completions", json=good) as r:
                out["no_key_status"] = r.status
        out["no_key_refused"] = out["no_key_status"] in (401, 403)
    return out


CANARY_PROMPT = "The quick brown fox"


class AdapterIgnored(RuntimeError):
    """An adapter's output equals the base model's: the engine serves the name without applying the weights."""


async def _greedy(session: aiohttp.ClientSession, base_url: str, model: str, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": CANARY_PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": 1,
        "ignore_eos": True,
    }
    async with session.post(base_url + "/v1/completions", json=body) as r:
        data = await r.json(content_type=None)
        if r.status != 200:
            raise AdapterIgnored(f"canary request for {model!r} failed: HTTP {r.status}: {str(data)[:300]}")
    choice = data["choices"][0]
    lps = (choice.get("logprobs") or {}).get("token_logprobs") or []
    return {"text": choice.get("text", ""), "logprobs": [float(x) for x in lps if x is not None]}


async def canary(
    session: aiohttp.ClientSession,
    base_url: str,
    engine: Engine,
    spec: ServerSpec,
    adapters: list[str],
    max_tokens: int = 8,
    min_logprob_diff: float = 1e-3,
) -> dict[str, Any]:
    """Before anything is measured: each adapter's greedy output for a fixed prompt must differ from the base
    model's, in text or in the log-probabilities of its tokens (the adapters' random lora_B makes them differ).
    An adapter the engine ignores raises ``AdapterIgnored`` naming it."""
    base = await _greedy(session, base_url, engine.request_model(spec, "base"), max_tokens)
    out: dict[str, Any] = {"prompt": CANARY_PROMPT, "base_text": base["text"], "adapters": {}}
    ignored = []
    for a in adapters:
        got = await _greedy(session, base_url, engine.request_model(spec, a), max_tokens)
        pairs = list(zip(got["logprobs"], base["logprobs"], strict=False))
        diff = max((abs(x - y) for x, y in pairs), default=0.0)
        differs = got["text"] != base["text"] or diff > min_logprob_diff
        out["adapters"][a] = {"text": got["text"], "max_logprob_diff": diff, "differs": differs}
        if not differs:
            ignored.append(a)
    if ignored:
        raise AdapterIgnored(
            f"{spec.server_id}: adapter(s) {', '.join(ignored)} give exactly the base model's output and "
            f"log-probabilities for {CANARY_PROMPT!r}: the engine serves them without applying them (an adapter "
            "whose target modules the engine does not support, or a load that silently failed); nothing measured"
        )
    return out


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


def _row_base(spec: ServerSpec, cell: Cell, rep: int, order: int, warmup: bool, mid: str) -> dict[str, Any]:
    return {
        "schema": BURST_SCHEMA,
        "server": spec.server_id,
        "condition": cell.condition,
        "burst": cell.burst,
        "stream": cell.stream,
        "rep": rep,
        "order": order,
        "warmup": warmup,
        "measurement_id": mid,
    }


@dataclass
class Measurer:
    """The measuring part of a server job, on a ready server: the canary, the warm-up, the cycles of method v2
    (``measure.cycles``: the loop and its stop rule live there; this object runs one burst), the probes, and
    where the time went."""

    job: ServerJob
    engine: Engine
    spec: ServerSpec
    base_url: str
    rset: dict[str, Any]
    session: aiohttp.ClientSession
    records: list[dict[str, Any]] = field(default_factory=list)
    measurements: list[dict[str, Any]] = field(default_factory=list)
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
    cycle_length: int = 0  # bursts per cycle
    _cycle_start: dict[str, Any] | None = None  # the host's counters at the start of the cycle under way
    _cycle_rows: list[dict[str, Any]] = field(default_factory=list)  # the rows of the cycle under way

    def __post_init__(self) -> None:
        job = self.job
        self.progress = Progress(
            job.reference or job.conditions[0], list(job.conditions), list(job.bursts), dict(job.references)
        )

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
        says (``during``: while in flight; ``between``: once, after it)."""
        sampler = self._sampler()
        with quiet_gc(self.job.harness["gc"]):
            if metrics == "during":
                sampler.start()
            reqs = _requests_for(self.engine, self.spec, self.rset, cell, tag)
            recs = await send(self.session, self.base_url, reqs, self.job)
            if metrics == "between":
                await sampler.scrape_once()
            samples = await sampler.stop()
        return recs, samples

    async def warm_up(self, cells: list[Cell]) -> None:
        """Every cell, recorded, flagged, excluded from statistics; scraped while in flight, so queue depths are
        seen for every condition whatever the measurements do."""
        t0 = time.monotonic()
        for cell in cells:
            for w in range(self.job.warmup_bursts):
                mid = f"warmup/{cell_id(cell)}/{w}" + (f"/start{self.instance}" if self.instance else "")
                metrics = "off" if self.job.harness["metrics"] == "off" else "during"
                recs, samples = await self.one_burst(cell, f"warmup{w}", metrics)
                row = self._keep(recs, samples, _row_base(self.spec, cell, -1 - w, -1, True, mid))
                log.info("warm-up %-24s: %8.1f tok/s, %d errors", cell_id(cell), row["throughput_tok_s"],
                         row["n_errors"])  # fmt: skip
        self.timing["warmup_s"] += time.monotonic() - t0

    def _keep(self, recs: list[RequestRecord], samples: list[dict[str, Any]], base: dict[str, Any]) -> dict[str, Any]:
        base = {**base, "server_start": self.instance}
        row = measurement_row([recs], base, self.job.outlier_fraction)
        row["metrics"] = summarize_samples(samples, self.engine)
        self.measurements.append(row)
        self.records += [{**r.to_row(), **base, "burst_index": 0} for r in recs]
        self.metric_rows += [{**s, "measurement_id": base["measurement_id"]} for s in samples]
        return row

    async def cycle_burst(self, cell: Cell, cycle: int, position: int) -> tuple[float, float]:
        """One measured burst of a cycle (``cycles.BurstFn``): the burst, then what it cost the engine's HTTP front
        end (its share of one CPU) and the GPU's busy share over it (NVML) and clocks; the host's state (engine
        threads, stolen time, the CPU probe) is read once a cycle, over the whole cycle, and given to each of its
        bursts, so the work between bursts stays small. Returns the burst's throughput and wall time."""
        mid = f"{cell_id(cell)}/{cycle}"
        t0, w0 = time.monotonic(), time.time()
        if position == 0 and self.host is not None:
            self._cycle_start = self.host.snapshot()
            self._cycle_rows = []
        fe0 = self._front_end_ticks()
        recs, samples = await self.one_burst(cell, mid, self.job.harness["metrics"])
        w1 = time.time()
        fe1 = self._front_end_ticks()
        self._check_server(f"burst {mid}")
        base = _row_base(self.spec, cell, cycle, self.order, False, mid)
        row = self._keep(recs, samples, {**base, "cycle": cycle, "position": position})
        self.order += 1
        if fe0 is not None and fe1 is not None and w1 > w0:
            row["metrics"]["front_end_cpu"] = round((fe1 - fe0) / CLOCK_TICKS / (w1 - w0), 3)
        if self.telemetry is not None:
            row["metrics"].update(self.telemetry.window(w0, w1))
        if self.busy is not None:
            row["metrics"]["gpu_busy_pct"] = self.busy.share(w0, w1)
        self._cycle_rows.append(row)
        if position == self.cycle_length - 1 and self.host is not None and self._cycle_start is not None:
            host = self.host.window(self._cycle_start, self.host.snapshot())
            for r in self._cycle_rows:
                r["metrics"].update(host)
            for g in gpu_memory() or []:  # between bursts, once a cycle
                self.gpu_peak[g["index"]] = max(self.gpu_peak.get(g["index"], 0), g["used_mib"])
        self.timing["measuring_s"] += row["burst_s"]
        self.timing["between_s"] += time.monotonic() - t0 - row["burst_s"]
        ok = row["n_errors"] == 0
        return (row["throughput_tok_s"] if ok else float("nan")), row["burst_s"]

    def _front_end_ticks(self) -> int | None:
        """CPU ticks (user + system, all threads) of the server's group leader: the engine's HTTP front end."""
        return cpu_ticks(self.host.pgid) if self.host is not None and self.host.pgid else None

    async def run(self, until_cycle: int | None) -> dict[str, Any]:
        """Measure on the server now serving (start ``self.instance``): the canary, the warm-up, then cycles
        until ``until_cycle`` (an earlier start's share) or, on the last start, until the stop rule says so."""
        job = self.job
        checked = None
        if self.spec.lora and self.spec.adapters:
            checked = await canary(self.session, self.base_url, self.engine, self.spec, sorted(self.spec.adapters))
            log.info("canary: every adapter changes the output (%s)", ", ".join(sorted(self.spec.adapters)))
        cells = cycle_cells(job.conditions, job.bursts, job.stream)
        self.cycle_length = len(cells)
        await self.warm_up(cells)
        await run_cycles(self.cycle_burst, cells, self.progress, job_targets(job), self.instance, until_cycle,
                         job.stream)  # fmt: skip
        probes = await _probe(self.session, self.base_url, self.engine, self.spec)
        probes["gpu_memory_peak_mib"] = self.gpu_peak or None
        probes["canary"] = checked
        probes["cycles"] = {"cycles": self.progress.cycles, "stop_reason": self.progress.stop_reason,
                            "measuring_s": round(self.progress.measuring_s, 2)}  # fmt: skip
        return probes


def job_targets(job: ServerJob) -> Targets:
    """When a job's cycles stop (``cycles.Targets``) from its settings."""
    return Targets(
        min_cycles=job.repetitions,
        max_cycles=job.max_repetitions,  # at least ``repetitions`` (ServerJob.__post_init__)
        target_points=job.target_points,
        target_ci_pct=job.target_ci_pct,
        max_measuring_s=job.max_measuring_s,
    )


async def _measure_all(
    job: ServerJob,
    engine: Engine,
    spec: ServerSpec,
    srv: ManagedServer,
    rset: dict[str, Any],
    m: Measurer | None,
    instance: int,
    until_cycle: int | None,
    telemetry: GpuTelemetry | None = None,
    busy: GpuBusy | None = None,
) -> tuple[Measurer, dict[str, Any]]:
    """Measure on one server start; ``m`` carries what earlier starts of the same job measured."""
    async with make_session(max(job.bursts), srv.api_key) as session:
        assert srv.proc is not None
        if m is None:
            m = Measurer(job, engine, spec, srv.base_url, rset, session)
        m.session, m.base_url, m.server_exit, m.instance = session, srv.base_url, srv.proc.poll, instance
        m.telemetry, m.host, m.busy = telemetry, HostTelemetry(srv.proc.pid), busy
        probes = await m.run(until_cycle)
    return m, probes


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


def per_adapter(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per condition, burst and adapter, from the measured (non-warm-up) requests: how many, their TTFT, ITL and
    end-to-end medians and p90. Within one mix, this shows whether one adapter waits for another (slot deferral)."""
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
                "ttft_median_ms": _median_ms([r["ttft_s"] for r in rs]),
                "ttft_p90_ms": _pct_ms([r["ttft_s"] for r in rs], 90),
                "itl_median_ms": _median_ms(itl),
                "latency_median_ms": _median_ms([r["latency_s"] for r in rs]),
                "latency_p90_ms": _pct_ms([r["latency_s"] for r in rs], 90),
            }
        )
    return out


def _facts_head(
    job: ServerJob, inputs: JobInputs, srv: ManagedServer, cpus: CpuPlan, lease: DeviceLease
) -> dict[str, Any]:
    return {
        "server": job.server_id,
        "engine": job.server.engine,
        "engine_version": inputs.engine_version,
        "status": "ok",
        "config": job.facts_config(),
        "argv": srv.public_argv,
        "api_key_required": bool(srv.api_key),
        "machine": machine_facts(),
        "device": lease.device,
        "harness": {**job.harness, "cpus": cpus.as_dict()},
        "measurement": job.measurement_facts(),
    }


def _serve_once(
    job: ServerJob,
    engine: Engine,
    spec: ServerSpec,
    srv: ManagedServer,
    rset: dict[str, Any],
    cpus: CpuPlan,
    facts: dict[str, Any],
    m: Measurer | None,
    k: int,
    until_cycle: int | None,
    telemetry: GpuTelemetry | None = None,
    busy: GpuBusy | None = None,
) -> tuple[float, Measurer, float]:
    """Start ``k`` of the server: wait ready, measure its share, stop; the facts get its memory figures and
    probes. Returns (readiness, the measurer, seconds the stop took)."""
    with srv:
        if k == 0:
            facts["gpu_memory_before_mib"] = gpu_memory()
        ready, placed = ready_server(srv, cpus, job.readiness_timeout_s)
        facts["harness"]["threads_placed"] = placed
        assert srv.proc is not None
        if k == 0:
            facts["gpu_memory_ready_mib"] = gpu_memory()
            facts["host_rss_ready_mib"] = group_rss_mib(srv.proc.pid)
        m, probes = asyncio.run(_measure_all(job, engine, spec, srv, rset, m, k, until_cycle, telemetry, busy))
        facts["host_rss_end_mib"] = group_rss_mib(srv.proc.pid)
        facts["probes"] = probes
        t_stop = time.monotonic()
    return ready, m, time.monotonic() - t_stop


def _serve_and_measure(
    job: ServerJob,
    inputs: JobInputs,
    engine: Engine,
    make_server: Callable[[], ManagedServer],
    rset: dict[str, Any],
    cpus: CpuPlan,
    lease: DeviceLease,
) -> dict[str, Any]:
    """Start the server ``job.server_starts`` times in turn (a fresh process each time, so the spread over
    repetitions includes how much one start differs from the next), measure on each, always stop it."""
    facts: dict[str, Any] = {}
    m: Measurer | None = None
    ready: list[float] = []
    stop_s = 0.0
    t_job = time.monotonic()
    busy = gpu_busy_for(lease.device)  # None on a CPU-only machine
    until = cycles_per_start(job_targets(job), job.server_starts)
    with GpuTelemetry(lease.device, cpus=cpus.server) as telemetry:  # inactive on a CPU-only machine
        for k in range(job.server_starts):
            srv = make_server()
            facts = facts or _facts_head(job, inputs, srv, cpus, lease)
            r, m, stopped = _serve_once(
                job, engine, inputs.spec, srv, rset, cpus, facts, m, k, until[k], telemetry, busy
            )
            ready.append(r)
            stop_s += stopped
    assert m is not None
    total = time.monotonic() - t_job
    facts["readiness_s"] = ready[0]
    facts["readiness_starts_s"] = ready
    facts["timing"] = {
        "readiness_s": sum(ready),
        **m.timing,
        "probes_s": total - sum(ready) - sum(m.timing.values()) - stop_s,
        "stop_s": stop_s,
        "total_s": total,
    }
    facts["_measurer"] = m
    return facts


@dataclass
class JobRun:
    """What a job needs on this machine before its server starts: the engine (the spec checked against it), the
    request set, the output folder with the server log's partial file, the CPU layout."""

    engine: Engine
    rset: dict[str, Any]
    out: Path
    server_log: Path
    cpus: CpuPlan


def prepare_job(job: ServerJob, inputs: JobInputs, out_dir: Path) -> JobRun:
    engine = get_engine(inputs.spec.engine)
    engine.check(inputs.spec)
    rset = read_json(inputs.request_set)
    missing = [c for c in job.conditions for b in job.bursts if set_key(c, b) not in rset["sets"]]
    if missing:
        raise ValueError(f"request set {inputs.request_set} lacks conditions {sorted(set(missing))}")
    out_dir.mkdir(parents=True, exist_ok=True)
    server_log = out_dir / "server.log.partial"
    server_log.unlink(missing_ok=True)
    return JobRun(engine, rset, out_dir, server_log, job_cpus(job))


Rows = list[dict[str, Any]]


def run_side_job(
    job: ServerJob,
    inputs: JobInputs,
    out_dir: Path,
    host: str,
    result_file: str,
    work: Callable[[ManagedServer, JobRun], Coroutine[Any, Any, tuple[dict[str, Any], Rows]]],
    before: Callable[[JobRun, DeviceLease | None], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A job beside the measuring ones (runtime loading, prefix caching) end to end: on the job's device lease,
    ``before`` (what it returns joins the result), then one server of the job's spec and ``work`` once it is
    ready. Its result, with the job's facts, goes to ``result_file``, its per-request rows to records.jsonl;
    returns the result."""
    run = prepare_job(job, inputs, out_dir)
    spec, out = inputs.spec, run.out
    with terminate_on_signals(), device.acquire(job_hardware(job), all_server_markers(), spec.server_id) as lease:
        extra = before(run, lease) if before else {}
        key = study_api_key(out.parents[1])  # results/KIND/SERVER -> results
        srv = engine_server(run.engine, spec, host, run.server_log, out / "server.pid", run.cpus, lease, key)
        with srv:
            ready_s, _ = ready_server(srv, run.cpus, job.readiness_timeout_s)
            result, rows = asyncio.run(work(srv, run))
    result = {
        **result,
        **extra,
        "status": "ok",
        "server": spec.server_id,
        "engine": spec.engine,
        "engine_version": inputs.engine_version,
        "readiness_s": ready_s,
        "machine": machine_facts(),
    }
    write_jsonl(out / "records.jsonl", rows)
    write_json(out / result_file, result)
    run.server_log.replace(out / "server.log")
    return result


def run_loadtest(job: ServerJob, inputs: JobInputs, out_dir: Path, host: str = "127.0.0.1") -> dict[str, Any]:
    """Run one server job end to end; returns the server facts written to ``facts.json``."""
    run = prepare_job(job, inputs, out_dir)
    engine, spec, out, server_log = run.engine, inputs.spec, run.out, run.server_log
    with terminate_on_signals(), device.acquire(job_hardware(job), all_server_markers(), spec.server_id) as lease:

        def make_server() -> ManagedServer:
            key = study_api_key(out.parents[1])  # results/servers/SERVER -> results
            return engine_server(engine, spec, host, server_log, out / "server.pid", run.cpus, lease, key)

        facts = _serve_and_measure(job, inputs, engine, make_server, run.rset, run.cpus, lease)
    m: Measurer = facts.pop("_measurer")
    facts["per_adapter"] = per_adapter(m.records)
    facts["gpu_memory_after_stop_mib"] = gpu_memory()
    log_text = server_log.read_text(errors="replace")
    facts["log"] = engine.parse_log(log_text)
    if facts["log"].get("engine_version") and not facts["engine_version"]:
        facts["engine_version"] = facts["log"]["engine_version"]
    write_jsonl(out / "records.jsonl", m.records)
    write_jsonl(out / "measurements.jsonl", m.measurements)
    write_jsonl(out / "metrics.jsonl", m.metric_rows)
    write_json(out / "facts.json", facts)
    server_log.replace(out / "server.log")
    return facts


def write_not_run(job: ServerJob, out_dir: Path, reason: str) -> None:
    """Outputs of a job that cannot run here (a server job, a runtime-loading or a prefix-caching one): empty
    tables and facts that say why, never made-up numbers."""
    side = "load.json" if job.runtime_load is not None else "prefix.json" if job.prefix_cache is not None else ""
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = ("records.jsonl",) if side else ("records.jsonl", "measurements.jsonl", "metrics.jsonl")
    for name in tables:
        write_jsonl(out_dir / name, [])
    (out_dir / "server.log").write_text(f"# {reason}\n")
    head = {"server": job.server_id, "engine": job.server.engine, "status": reason}
    if side:
        write_json(out_dir / side, head)
    else:
        write_json(
            out_dir / "facts.json",
            {**head, "engine_version": job.engine_version, "config": job.facts_config(), "machine": machine_facts()},
        )
    log.info("%s: %s", job.server_id, reason)


def run_rule_job(
    params: str, inputs: Any, out_dir: Path, run: Callable[[ServerJob, JobInputs, Path], Any] = run_loadtest
) -> None:
    """A rule's job from its params (``ServerJob.to_json``) and its input files: measured with ``run``, or where
    the engine cannot run here, outputs that say so."""
    job = ServerJob.from_json(params)
    if not job.runnable:
        write_not_run(job, out_dir, reason="not run: needs a GPU")
    else:
        run(job, read_inputs(job, inputs.env, inputs.model, inputs.requests, list(inputs.adapters)), out_dir)
