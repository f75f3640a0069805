"""How much machine time a study needs, job by job, before it runs: the figure a config header quotes and a stretch
of lent GPU time is planned with.

A measuring job's time (method v2) is its server's start-up, warm-up (one burst per cell), its cycles and the
server's stop; a cycle is one burst of every cell (condition x burst size x streamed or not), so it lasts the
sum of its bursts plus the harness's work between them. Cycles go from ``repetitions`` (the low figure) to
``max_repetitions`` or ``max_measuring_s`` seconds of bursts, whichever comes first (the high figure). A side job
(runtime loading, prefix caching) is a start-up and its work. A rate sweep is a start-up, the stop and, per mix,
one probe run and ``repeats`` cycles of runs, each run lasting its ramp, window and drain plus ``settle_s``: from
``points`` runs a cycle (the first cycle stopped at the probe's rate, the low figure) to every rate of the grid up
to ``max_rate_factor`` (no rate over-saturated, the high figure); with ``search_steps`` K, the first cycle so and
each later one K runs (K + 1 where its steps all fell on one side). Start-ups, a burst's duration per burst size and the
work between bursts are taken from finished jobs of the same engine under --from STUDY_DIR (their facts' timing
and their bursts), else stated defaults. A burst whose adapters outnumber the server's slots runs in rounds (the
requests of the adapters that found a slot, then the next ones: ``slot_rounds`` on the burst's own draw), and a
round with k distinct adapters takes 1 + DISTINCT_ADAPTER_COST x (k - 1) times a round of one: bursts are timed
per round, so a 2-slot server's burst of 48 over 128 adapters (21 rounds) is timed as 21 bursts, not one; the
warm-up, which sends the same draws, per round too. The
low figure takes the median start, the high one the slowest start seen (the first start on a fresh machine
compiles kernels). A study of a bigger model or longer outputs than the
calibrating one has longer bursts than its timings say.

With --left STUDY_DIR, the jobs already saved there and still current for the config (those that
``dev/study_results.py restore`` would put back) are listed as done and left out of the total: what the next
stretch has to run.

With --targets, the jobs not done are printed one a line as their result file and high estimate in seconds,
in the order a stretch runs them (dev/device_stretch.sh reads it: it skips a job that would outlast the
stretch's STRETCH_MIN minutes rather than have it cut halfway).

usage: .venv/bin/python tools/estimate_study.py CONFIG [--from STUDY_DIR ...] [--left STUDY_DIR]
                                                [--engines ID ...] [--hardware gpu] [--targets]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from lorabench.archive import unpack_study  # noqa: E402
from lorabench.config import load_file, prefix_cache_servers, rate_sweep_mixes, runtime_load_servers  # noqa: E402
from lorabench.engines import get_engine  # noqa: E402
from lorabench.io import read_json, read_jsonl, stored  # noqa: E402
from lorabench.job import ServerJob, server_job  # noqa: E402
from lorabench.loadgen.traffic import WorkloadError, workload_of, workload_specs  # noqa: E402
from lorabench.loadgen.workload import burst_adapters, slot_rounds  # noqa: E402
from lorabench.measure.cycles import cycle_cells  # noqa: E402
from lorabench.measure.sweep import SweepSettings  # noqa: E402

# Per job kind: files kept as they are, files kept compressed (.gz), the per-request records, the facts file.
JOBS = {
    "servers": (("facts.json",), ("measurements.jsonl", "metrics.jsonl", "server.log"), "records.jsonl", "facts.json"),
    "runtime_load": (("load.json",), ("server.log",), "records.jsonl", "load.json"),
    "prefix_cache": (("prefix.json",), ("server.log",), "records.jsonl", "prefix.json"),
    "rate_sweep": (("sweep.json", "facts.json"), ("server.log",), "records.jsonl", "sweep.json"),
}


def stale(facts: dict, config: dict | None) -> str:
    """Why a saved server job no longer matches the config ('' when it does): its measurement settings or its
    server's configuration differ from the job the config makes."""
    if config is None or "measurement" not in facts and "config" not in facts:
        return ""
    if facts.get("server", "") not in config["servers"]:
        return "no such server in the config"
    job = server_job(config, facts["server"], hardware="")
    # focus_cycles decides where the cycles after the minimum go, not what a figure is: a job saved with either
    # setting (or before it existed) still answers the config
    saved = {k: v for k, v in (facts.get("measurement") or {}).items() if k != "focus_cycles"}
    want = {k: v for k, v in job.measurement_facts().items() if k != "focus_cycles"}
    if saved and saved != want:
        return f"measured with {facts['measurement']}"
    cfg = facts.get("config") or {}
    for key, value in job.facts_config().items():
        got = cfg.get(key)
        if key in ("bursts", "adapters"):
            got, value = sorted(got or []), sorted(value)
        if got != value:
            return f"{key} was {cfg.get(key)!r}"
    return ""


def why_stale(kind: str, saved: dict, config: dict | None) -> str:
    """Why a saved job of this kind (a key of ``JOBS``) is measured again under ``config`` ('' when it is not)."""
    if kind == "servers":
        return stale(saved, config)
    if kind == "runtime_load":
        return stale_load(saved, config)
    if kind == "rate_sweep":
        return stale_sweep(saved, config)
    return ""


def stale_sweep(sweep: dict, config: dict | None) -> str:
    """Why a saved rate sweep is measured again ('' when it is not): its settings or mixes differ from the
    config's (its server's own configuration is the load test's to check)."""
    if config is None:
        return ""
    want = rate_sweep_mixes(config).get(sweep.get("server", ""))
    if want is None:
        return "its server is not in rate_sweep.servers"
    if list(sweep.get("mixes") or []) != want:
        return f"swept mixes {sweep.get('mixes')}"
    settings = SweepSettings.from_config(config["rate_sweep"], config["workload"]["seed"], config["request_timeout_s"])
    if sweep.get("settings") != settings.to_json():
        return f"swept with {sweep.get('settings')}"
    return ""


def stale_load(load: dict, config: dict | None) -> str:
    """Why a saved runtime-loading job is measured again ('' when it is not): one measured before the unload was
    checked (the adapter gone, an implicit reload undone) may have timed loads of an adapter still loaded."""
    if config is not None and not all("listed_after_unload" in c for c in load.get("cycles", [])):
        return "measured before unloads were checked"
    return ""


# Used where no finished job of the engine was given: seconds, rounded from the H200 studies under studies/.
DEFAULTS = {
    "start_s": 160.0,
    "first_start_s": 200.0,
    "warmup_per_cell_s": 1.2,
    "between_bursts_s": 0.02,
    "burst_s": 1.0,
}
DEFAULT_SIDE_WORK_S = 60.0
STOP_S = 10.0
# A batch of k distinct adapters against one of one, at 48 requests with every adapter in a slot: 1 + 31 x 0.030 in
# studies/llama2-7b-rank16-h100 (32 distinct adapters against one, Llama-2-7B shape, rank 16: 1.92 times as long);
# 0.047-0.052 in studies/many-adapters-h100 (Qwen3-8B shape, rank 8: 26 and 32 distinct against 8, 3.08 and 3.39 s
# against 1.83). The higher one: a stretch planned short loses its last job.
DISTINCT_ADAPTER_COST = 0.05


def rounds_cost(rounds: list[int]) -> float:
    """A burst's time in rounds of one adapter (or none): its rounds one after another, each dearer by its
    distinct adapters."""
    return sum(1.0 + DISTINCT_ADAPTER_COST * max(0, k - 1) for k in rounds)


def slots(kind: str, lora: bool, max_loras: int | None) -> tuple[int | None, bool]:
    """(adapter slots per batch, whether base-model requests take one) of a server of engine ``kind``: its
    max_loras, else the engine's default; no limit with LoRA off or an engine not registered here."""
    if not lora:
        return None, False
    try:
        engine = get_engine(kind)
    except KeyError:
        return max_loras, False
    return max_loras or engine.default_max_loras, engine.base_takes_slot


def burst_costs(job_dir: Path, max_loras: int | None, base_slot: bool) -> dict[str, float]:
    """Per measurement id of a saved job, ``rounds_cost`` of its (first) burst's adapters in request order, from
    its per-request records; empty where the job kept none."""
    if not stored(job_dir / "records.jsonl").exists():
        return {}
    bursts: dict[str, list[tuple[str, str]]] = {}
    for r in read_jsonl(job_dir / "records.jsonl"):
        if not r.get("warmup") and int(r.get("burst_index") or 0) == 0 and "adapter" in r:
            bursts.setdefault(r["measurement_id"], []).append((str(r.get("request_id", "")), r["adapter"]))
    return {
        mid: rounds_cost(slot_rounds([a for _, a in sorted(rows)], max_loras, base_slot))
        for mid, rows in bursts.items()
    }


@dataclass
class Timings:
    """What finished jobs of one engine took (seconds)."""

    starts: list[float] = field(default_factory=list)
    warmup_per_cell: list[float] = field(default_factory=list)
    between_bursts: list[float] = field(default_factory=list)  # the harness's work between two bursts
    stops: list[float] = field(default_factory=list)
    side_work: list[float] = field(default_factory=list)
    # one burst's wall time, by burst size and the kind of its requests (``request_kind``)
    bursts: dict[tuple[int, tuple[str, int]], list[float]] = field(default_factory=dict)

    def burst_s(self, size: int, kind: tuple[str, int] | None = None) -> tuple[float, float, bool]:
        """(typical, worst, measured) wall time of one burst of ``size`` requests of ``kind``: the measured
        bursts of that kind and size, else of that kind and the nearest size, else of any kind (the nearest size,
        then the nearest output length)."""
        if not self.bursts:
            return DEFAULTS["burst_s"], DEFAULTS["burst_s"], False
        keys = [k for k in self.bursts if k[1] == kind] or list(self.bursts)
        out = kind[1] if kind else 0
        near = min(keys, key=lambda k: (abs(k[0] - size), abs(k[1][1] - out), -k[0]))
        vals = self.bursts[near]
        return statistics.median(vals), statistics.quantiles(vals, n=10)[-1] if len(vals) > 1 else vals[0], True

    def figure(self, name: str) -> tuple[float, float, bool]:
        """(typical, worst, measured) for one figure; ``measured`` False where the default stands in."""
        values = {
            "start_s": self.starts,
            "warmup_per_cell_s": self.warmup_per_cell,
            "between_bursts_s": self.between_bursts,
            "stop_s": self.stops,
            "side_work_s": self.side_work,
        }[name]
        if values:
            return statistics.median(values), max(values), True
        default = {"stop_s": STOP_S, "side_work_s": DEFAULT_SIDE_WORK_S}.get(name) or DEFAULTS[name]
        worst = DEFAULTS["first_start_s"] if name == "start_s" else default
        return default, worst, False


def _records_span_s(path: Path) -> float | None:
    """Wall time from a side job's first request to its last (records.jsonl[.gz])."""
    if not stored(path).exists():
        return None
    rows = list(read_jsonl(path))
    starts = [r["wall_start"] for r in rows if "wall_start" in r]
    ends = [r["wall_start"] + r.get("latency_s", 0.0) for r in rows if "wall_start" in r]
    return max(ends) - min(starts) if starts else None


# Timings are kept per engine kind and LoRA on or off: a LoRA server starts later (its adapters loaded at start) and
# its bursts, base requests' included, run slower than with LoRA off. SGLang's 32-slot server of the Llama-2-7B shape
# was put at 7.9-8.0 minutes from the LoRA-off job of that shape alone; in loan 15 it was ready after 127 s (55 s
# with LoRA off) and its cycles took 50 s, not 37.
Key = tuple[str, bool]


def calibrate(study_dirs: list[Path]) -> dict[Key, Timings]:
    """Per engine kind and LoRA on or off, the timings of the finished jobs saved under the study folders."""
    out: dict[Key, Timings] = {}
    for sdir in study_dirs:
        for facts_path in sorted(sdir.glob("servers/*/facts.json")):
            facts = read_json(facts_path)
            timing = facts.get("timing") or {}
            if facts.get("status") != "ok" or not timing.get("measuring_s"):
                continue
            rows = list(read_jsonl(facts_path.parent / "measurements.jsonl"))  # kept as measurements.jsonl.gz
            measured = [r for r in rows if not r.get("warmup")]
            if not measured:
                continue
            warm = {r["measurement_id"] for r in rows if r.get("warmup")}
            n_bursts = sum(int(r.get("n_bursts") or 1) for r in measured)
            # timed per round of one adapter: a burst that waited for slots stands for several rounds (with LoRA off
            # every burst is one round: its per-request records are not read)
            cfg = facts.get("config") or {}
            costs = (
                burst_costs(facts_path.parent, *slots(facts["engine"], True, cfg.get("max_loras")))
                if cfg.get("lora")
                else {}
            )
            t = out.setdefault((facts["engine"], bool(cfg.get("lora"))), Timings())
            t.starts.extend(facts.get("readiness_starts_s") or [facts["readiness_s"]])
            # per round, as the bursts below: the warm-up sends the measured cells' bursts, whose draws (seeded)
            # pass the slots in as many rounds as the measured ones
            mean_cost = sum(costs.get(r["measurement_id"], 1.0) for r in measured) / len(measured)
            t.warmup_per_cell.append(timing.get("warmup_s", 0.0) / max(1, len(warm)) / mean_cost)
            t.between_bursts.append((timing.get("between_s", 0.0) + timing.get("probes_s", 0.0)) / n_bursts)
            for r in measured:
                if r.get("burst_s") and r.get("n_errors") == 0:
                    n = max(1, int(r.get("n_requests") or r["burst"]))
                    shape = request_kind(
                        float(r.get("prompt_tokens") or 0) / n, float(r.get("completion_tokens") or 0) / n
                    )
                    per_burst = r["burst_s"] / int(r.get("n_bursts") or 1)
                    t.bursts.setdefault((int(r["burst"]), shape), []).append(
                        per_burst / costs.get(r["measurement_id"], 1.0)
                    )
            t.stops.append(timing.get("stop_s", STOP_S))
        for path in sorted(sdir.glob("rate_sweep/*/facts.json")):
            facts = read_json(path)
            if facts.get("status") == "ok":
                t = out.setdefault((facts["engine"], bool((facts.get("config") or {}).get("lora", True))), Timings())
                t.starts.extend(facts.get("readiness_starts_s") or [facts["readiness_s"]])
                t.stops.append((facts.get("timing") or {}).get("stop_s", STOP_S))
        for kind, name in (("runtime_load", "load.json"), ("prefix_cache", "prefix.json")):
            for path in sorted(sdir.glob(f"{kind}/*/{name}")):
                res = read_json(path)
                if res.get("status") != "ok":
                    continue
                t = out.setdefault((res["engine"], True), Timings())  # adapters loaded or sent: a LoRA server
                if res.get("readiness_s"):
                    t.starts.append(res["readiness_s"])
                span = _records_span_s(path.parent / "records.jsonl")
                if span is not None:
                    t.side_work.append(span)
    return out


def merged(parts: Iterable[dict[Key, Timings]]) -> dict[Key, Timings]:
    """Per engine and LoRA setting, the timings of several studies together (as ``calibrate`` of all their folders
    at once)."""
    out: dict[Key, Timings] = {}
    for part in parts:
        for key, t in part.items():
            into = out.setdefault(key, Timings())
            for f in fields(Timings):
                if f.name != "bursts":
                    getattr(into, f.name).extend(getattr(t, f.name))
            for cell, vals in t.bursts.items():
                into.bursts.setdefault(cell, []).extend(vals)
    return out


@dataclass
class Estimate:
    job: str
    engine: str
    what: str
    low_s: float
    high_s: float
    measured: bool  # every figure it uses came from finished jobs
    done: bool = False  # saved and current under --left: not run again
    target: str = ""  # the job's result file under results/, what Snakemake is asked for
    order: tuple = ()  # where the job comes in a stretch (see ``stretch_order``)


LONG_PROMPT_TOKENS = 256  # a request with a prompt this long or longer is timed apart (its prefill counts)


def request_kind(prompt_tokens: float, output_tokens: float) -> tuple[str, int]:
    """What a burst's time depends on besides its size: long or short prompts, and the output length."""
    return ("long" if prompt_tokens >= LONG_PROMPT_TOKENS else "short", int(round(output_tokens)))


def _typical(length: Any) -> float | None:
    """A representative value of a config length (lengths.Length): its value, mean, median or the middle of its
    bounds."""
    if length is None:
        return None
    for v in (length.value, length.mean, length.median):
        if v is not None:
            return float(v)
    return (length.min + length.max) / 2 if length.min is not None and length.max is not None else None


def condition_kinds(config: dict) -> dict[str, tuple[str, int] | None]:
    """Each condition's ``request_kind`` from its workload (None where the config cannot say: a dataset)."""
    try:
        specs = workload_specs(config.get("workload") or {}, config.get("workloads"))
    except WorkloadError:
        return {}
    out: dict[str, tuple[str, int] | None] = {}
    for name, cond in (config.get("conditions") or {}).items():
        spec = specs.get(workload_of(cond))
        out_tokens = _typical(spec.output) if spec else None
        if spec is None or spec.dataset is not None or out_tokens is None:
            out[name] = None
            continue
        prompt = _typical(spec.prompt_tokens) if spec.prompt_tokens else 0.0
        out[name] = request_kind(prompt or 0.0, out_tokens)
    return out


def cell_costs(config: dict, job: ServerJob) -> dict[tuple[str, int], float]:
    """Per (condition, burst size) of a job, ``rounds_cost`` of the burst's own draw of adapters on the server's
    slots (1 with LoRA off)."""
    seed = int(config["workload"]["seed"])
    n, base_slot = slots(job.server.engine, job.server.lora, job.server.max_loras)
    out = {}
    for name in job.conditions:
        for burst in job.bursts:
            adapters = burst_adapters(name, config["conditions"][name], burst, seed)
            out[(name, burst)] = rounds_cost(slot_rounds(adapters, n, base_slot))
    return out


def measuring(
    job: ServerJob,
    t: Timings,
    kinds: dict[str, tuple[str, int] | None] | None = None,
    costs: dict[tuple[str, int], float] | None = None,
) -> Estimate:
    cells = cycle_cells(job.conditions, job.bursts, job.stream)
    start, start_hi, m1 = t.figure("start_s")
    warm, _, m2 = t.figure("warmup_per_cell_s")
    between, between_hi, m3 = t.figure("between_bursts_s")
    stop, _, m4 = t.figure("stop_s")
    figures = [t.burst_s(c.burst, (kinds or {}).get(c.condition)) for c in cells]
    factor = [(costs or {}).get((c.condition, c.burst), 1.0) for c in cells]
    cycle = sum(f[0] * k for f, k in zip(figures, factor, strict=True))
    cycle_hi = sum(f[1] * k for f, k in zip(figures, factor, strict=True))
    # a warm-up burst waits for slots as a measured one does
    fixed = warm * sum(factor) + stop
    lo = job.server_starts * start + fixed + job.repetitions * (cycle + len(cells) * between)
    # at most max_repetitions cycles, and no cycle begins after max_measuring_s seconds of bursts
    cycles_hi = min(job.max_repetitions, math.ceil(job.max_measuring_s / cycle_hi) + 1)
    cycles_hi = max(cycles_hi, job.repetitions)
    hi = job.server_starts * start_hi + fixed + cycles_hi * (cycle_hi + len(cells) * between_hi)
    reps = f"{job.repetitions}" if cycles_hi == job.repetitions else f"{job.repetitions}-{cycles_hi}"
    what = f"{len(cells)} cells x {reps} cycles of ~{cycle:.0f} s"
    return Estimate(
        job.server_id, job.server.engine, what, lo, hi, m1 and m2 and m3 and m4 and all(f[2] for f in figures)
    )


def side(job: ServerJob, t: Timings, kind: str) -> Estimate:
    start, start_hi, m1 = t.figure("start_s")
    work, work_hi, m2 = t.figure("side_work_s")
    stop, _, m3 = t.figure("stop_s")
    return Estimate(job.server_id, job.server.engine, kind, start + work + stop, start_hi + work_hi + stop, m1 and m2)


def sweeping(job: ServerJob, t: Timings, settings: SweepSettings, mixes: int) -> Estimate:
    """A rate sweep (the module's docstring): its runs take the time their phases say, whatever the engine."""
    start, start_hi, m1 = t.figure("start_s")
    stop, _, _ = t.figure("stop_s")
    run_s = settings.phases.total_s + settings.settle_s
    grid = len(settings.fractions())
    later = settings.repeats - 1
    if settings.search_steps > 0:  # cycle 0 on the grid, then search_steps runs per cycle (a bracketed capacity)
        k = settings.search_steps
        lo = start + stop + mixes * run_s * (1 + settings.points + k * later)
        hi = start_hi + stop + mixes * run_s * (1 + grid + (k + 1) * later)  # + a cycle's end run
        what = f"{mixes} mixes x (1 cycle of {settings.points}-{grid} runs, {later} of {k} steps) of {run_s:.0f} s"
    else:
        lo = start + stop + mixes * run_s * (1 + settings.points * settings.repeats)
        hi = start_hi + stop + mixes * run_s * (1 + grid * settings.repeats)
        what = f"{mixes} mixes x {settings.repeats} cycles of {settings.points}-{grid} runs of {run_s:.0f} s"
    if settings.min_window_requests:  # the rates are the probe's, unknown here: a low-rate window runs longer
        what += f"; more where a window needs {settings.min_window_requests} requests (min_window_requests)"
    return Estimate(job.server_id + "-sweep", job.server.engine, what, lo, hi, m1)


def stretch_order(config: dict, server: str, side_rank: int) -> tuple:
    """Where a job comes in a stretch: SGLang's jobs first, then per engine LoRA off, then by slot count, each
    side job (``side_rank`` 1: runtime loading, 2: prefix caching, 3: the rate sweep) right after the server it
    copies."""
    s = config["servers"][server]
    return (s["engine"] != "sglang", s["engine"], s["lora"], s.get("max_loras") or 0, server, side_rank)


def timed(timings: dict[Key, Timings], job: ServerJob) -> Timings:
    """The timings for a job: its engine's with its LoRA setting, else its engine's with the other one."""
    engine, lora = job.server.engine, bool(job.server.lora)
    return timings.get((engine, lora)) or timings.get((engine, not lora)) or Timings()


def estimate(config: dict, timings: dict[Key, Timings], engines: list[str] | None, hardware: str) -> list[Estimate]:
    def wanted(server: str) -> bool:
        return engines is None or config["servers"][server]["engine"] in engines

    out = []
    kinds = condition_kinds(config)
    for server in config["servers"]:
        if wanted(server):
            job = server_job(config, server, hardware)
            est = measuring(job, timed(timings, job), kinds, cell_costs(config, job))
            est.target, est.order = f"results/servers/{server}/facts.json", stretch_order(config, server, 0)
            out.append(est)
    sides = (
        (1, "runtime loading", runtime_load_servers(config), "runtime_load/{}/load.json"),
        (2, "prefix caching", prefix_cache_servers(config), "prefix_cache/{}/prefix.json"),
    )
    for rank, label, servers, result in sides:
        for server in filter(wanted, servers):
            job = server_job(config, server, hardware, runtime=rank == 1, prefix=rank == 2)
            est = side(job, timed(timings, job), label)
            est.target, est.order = "results/" + result.format(server), stretch_order(config, server, rank)
            out.append(est)
    mixes = rate_sweep_mixes(config)
    if mixes:
        st = SweepSettings.from_config(config["rate_sweep"], config["workload"]["seed"], config["request_timeout_s"])
        for server in filter(wanted, mixes):
            job = server_job(config, server, hardware)
            est = sweeping(job, timed(timings, job), st, len(mixes[server]))
            est.target, est.order = f"results/rate_sweep/{server}/sweep.json", stretch_order(config, server, 3)
            out.append(est)
    return out


def saved_and_current(study: Path, config: dict) -> set[str]:
    """Job ids (``vllm-lora-2``, ``vllm-lora-2-runtime``, ...) saved under ``study`` that a restore with this
    config keeps."""
    out = set()
    suffix = {"servers": "", "runtime_load": "-runtime", "prefix_cache": "-prefix", "rate_sweep": "-sweep"}
    for kind, (_, _, _, facts_name) in JOBS.items():
        for path in sorted(study.glob(f"{kind}/*/{facts_name}")):
            saved = read_json(path)
            if saved.get("status") != "ok":
                continue
            if not why_stale(kind, saved, config):
                out.add(path.parent.name + suffix[kind])
    return out


def study_architecture(study: Path) -> str | None:
    """The architecture file of the model a study measured (its model manifest), None where it kept none."""
    manifest = study / "model" / "manifest.json"
    return read_json(manifest).get("architecture_file") if manifest.exists() else None


def key_label(key: Key) -> str:
    return f"{key[0]} with LoRA" if key[1] else f"{key[0]} with LoRA off"


def render(rows: list[Estimate], source: str) -> str:
    lines = [f"{'job':<28} {'engine':<8} {'minutes':>11}  what", "-" * 88]
    for r in rows:
        mark = "" if r.measured else "  (defaults)"
        span = "   done    " if r.done else f"{r.low_s / 60:5.1f}-{r.high_s / 60:<5.1f}"
        lines.append(f"{r.job:<28} {r.engine:<8} {span}  {r.what}{mark}")
    todo = [r for r in rows if not r.done]
    lo, hi = sum(r.low_s for r in todo), sum(r.high_s for r in todo)
    lines += [
        "-" * 88,
        f"{'total' + (' left' if len(todo) < len(rows) else ''):<37} {lo / 60:5.1f}-{hi / 60:<5.1f}"
        f"  timings from {source}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--from", dest="studies", nargs="*", default=[], help="study folders with finished jobs")
    ap.add_argument("--left", help="a study folder whose saved, current jobs count as done")
    ap.add_argument("--engines", nargs="*", help="only the jobs of these engine ids of the config")
    ap.add_argument("--hardware", default="gpu", choices=["gpu", "cpu"])
    ap.add_argument(
        "--targets",
        action="store_true",
        help="print, in stretch order, each job not done as its result file and its high estimate in seconds",
    )
    args = ap.parse_args(argv)
    for flag, s in [*(("--from", x) for x in args.studies), *((("--left", args.left),) if args.left else ())]:
        if not Path(s).is_dir():
            ap.error(f"{flag} {s}: no such folder")
    # a published study keeps its jobs in its archive: read from an unpacked copy
    unpacked = tempfile.TemporaryDirectory(prefix="estimate-")
    paths = {s: unpack_study(Path(s), Path(unpacked.name) / str(i)) for i, s in enumerate([*args.studies, args.left])
             if s}  # fmt: skip
    config = load_file(args.config)
    unknown = sorted(set(args.engines or []) - set(config["engines"]))
    if unknown:
        ap.error(f"--engines {' '.join(unknown)}: not an engine of {args.config} (known: {sorted(config['engines'])})")
    want = config["model"].get("architecture")
    archs = {s: study_architecture(paths[s]) for s in args.studies}
    per_study = {s: calibrate([paths[s]]) for s in args.studies}  # each study read once
    # A study of another model times other bursts: an engine's jobs are timed from the studies of this model where
    # some measured that engine with the job's LoRA setting, from all of them otherwise (a Qwen3-8B cycle was put at
    # 14 s from the 1.7B's and 8B's jobs pooled, at 26 s from the 8B's alone; it took 35 on an H100), and from the
    # other setting only where no study measured this one (``timed``).
    own = merged(per_study[s] for s in args.studies if archs[s] == want)
    timings = {**merged(per_study.values()), **own}
    studies = list(args.studies)
    for s in args.studies:
        if archs[s] and archs[s] != want:
            stand_in = sorted(set(per_study[s]) - set(own))
            if not stand_in:
                studies.remove(s)
            why = (
                f"times {', '.join(map(key_label, stand_in))} (no study of this model did): "
                "take the high figure or more"
                if stand_in
                else "left out (studies of this model timed its engines)"
            )
            print(f"note: {s} measured {archs[s]}, this study {want}: {why}")
    rows = estimate(config, timings, args.engines, args.hardware)
    if args.left:
        done = saved_and_current(paths[args.left], config)
        for r in rows:
            r.done = r.job in done
    if args.targets:
        for r in sorted((r for r in rows if not r.done), key=lambda r: r.order):
            print(r.target, round(r.high_s))
        return 0
    print(render(rows, ", ".join(studies) or "defaults"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
