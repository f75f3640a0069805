"""Claims cross-check: every registered claim is evaluated against this run's artifacts and measurements.

Verdicts are computed, never written by hand:
- ``reproduced``: comparable, and the measured figure satisfies the claim's rule;
- ``direction only``: comparable, same sign as the claim but outside its tolerance;
- ``contradicted``: comparable, and the rule fails (opposite direction, or a behaviour that does not hold);
- ``not comparable``: the run differs in hardware or model size (said plainly, with our figure for reference),
  or the claim is an external figure no run of ours measures;
- ``inconclusive``: comparable, the median misses the claim, but the claimed figure lies inside our span
  (stats.ratio_span: for two cells of one server job, the 95 % interval of the ratio of measurements taken close
  together; across servers, what the 95 % intervals of numerator and denominator allow), so the data cannot tell;
  a ``decisive`` threshold claim is inconclusive while its span crosses the threshold, unless the rule's
  ``negligible`` margin bounds the effect (``_decide_threshold``);
- ``not run``: the measurement the claim needs was not made here (and why).

Absolute figures (tok/s, MiB, seconds, counts of graph captures) are only comparable on the hardware they were
measured on; percent changes and behaviours are judged on any GPU with the claim's model, and the report says
which hardware each side used.
"""

from __future__ import annotations

import functools
import logging
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .adapters import lora_parameter_count
from .engines.base import models_listed_ok
from .io import read_json, write_json
from .resources import boot_ids, other_machines
from .runtime_figures import cold_vs_resident
from .stats import fmt_num, paired_ratios, ratio_span

log = logging.getLogger(__name__)

VERDICTS = ("reproduced", "direction only", "inconclusive", "contradicted", "not comparable", "not run")
ABSOLUTE_UNITS = ("tok_s", "MiB", "s", "ms")
Span = tuple[float, float] | None  # for throughput ratios: stats.ratio_span's (paired within one job)


@dataclass(frozen=True)
class Verdict:
    """One claim judged against this run (verdicts.json ``claims``): the registry's entry as it stands (statement,
    claimed figure, measure, rule), what this run measured, the verdict (one of VERDICTS), why, and the evidence
    (rows, servers or artifacts) it rests on. ``finding``: the report finding that carries it, if any; ``engine``:
    the engine the claim is about (its measure's or scope's), None when it names none."""

    id: str
    source: str
    section: str
    statement: str
    claimed: dict[str, Any]
    context: str | None
    measure: dict[str, Any]
    rule: dict[str, Any]
    measured: Any  # a figure, a behaviour's answer (bool, text) or None
    measured_text: str
    claimed_text: str
    rule_result: str | None
    verdict: str
    why: str
    evidence: list[str]
    finding: str | None = None
    engine: str | None = None
    span: tuple[float, float] | None = None  # a ratio's span in percent (paired, or across two servers' cells)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "section": self.section, "statement": self.statement,
                "claimed": self.claimed, "context": self.context, "measure": self.measure, "rule": self.rule,
                "measured": self.measured, "measured_text": self.measured_text, "claimed_text": self.claimed_text,
                "rule_result": self.rule_result, "verdict": self.verdict, "why": self.why, "evidence": self.evidence,
                **({"finding": self.finding} if self.finding else {}),
                **({"engine": self.engine} if self.engine else {}),
                **({"span": [round(v, 2) for v in self.span]} if self.span else {})}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Verdict:
        if d["verdict"] not in VERDICTS:
            raise ValueError(f"claim {d['id']}: unknown verdict {d['verdict']!r}")
        return cls(d["id"], d["source"], str(d["section"]), d["statement"], d["claimed"], d.get("context"),
                   d["measure"], d["rule"], d.get("measured"), d["measured_text"], d["claimed_text"],
                   d.get("rule_result"), d["verdict"], d["why"], list(d.get("evidence") or []),
                   d.get("finding"), d.get("engine"), tuple(d["span"]) if d.get("span") else None)  # fmt: skip


class Inconclusive(str):
    """A behaviour probe's answer when the data cannot tell (intervals overlap); the text says why."""


_METRIC_COLS = {
    "throughput_tok_s": "throughput_median",
    "itl_median_ms": "itl_median_ms",
    "ttft_median_ms": "ttft_median_ms",
    "latency_median_ms": "latency_median_ms",
    "spread_pct": "throughput_spread_pct",
}


class Context:
    """What the claims are evaluated against: summary rows, server facts, runtime loads, model and adapters."""

    def __init__(
        self,
        summary: dict[str, Any],
        model: dict[str, Any],
        adapters: list[dict[str, Any]],
        reference_arch: dict[str, Any] | None = None,
        queues: dict[str, Any] | None = None,
        analogue_model: bool = False,
    ):
        self.summary = summary
        # The study's model stands in for the claim's (config ``analogue_model``): ratios are judged on it though
        # its size differs; absolute figures stay not comparable.
        self.analogue_model = analogue_model
        # Batch size and queues per server and condition (results/queues/queues.json), for claims about why.
        self.queues = queues
        # The source's architecture (Qwen3-1.7B), for claims about its adapter sizes; an input of the rule.
        self.reference_arch = reference_arch
        self.rows: list[dict[str, Any]] = summary.get("rows", [])
        self.facts: list[dict[str, Any]] = summary.get("facts", [])
        self.raw_facts: dict[str, Any] = summary.get("server_facts_raw", {})
        self.runtime: list[dict[str, Any]] = [r for r in summary.get("runtime", []) if r.get("status") == "ok"]
        self.runtime_all: list[dict[str, Any]] = summary.get("runtime", [])
        self.prefix_all: list[dict[str, Any]] = summary.get("prefix_cache", [])
        self.engine_scope: str | None = None  # the engine a probe's claim is about (its measure's or scope's)
        self.model = model
        self.adapters = adapters
        self.hardware = summary.get("hardware") or "cpu"
        self.model_params = int(model.get("parameters") or 0)
        self.bursts = sorted({r["burst"] for r in self.rows if r.get("burst") is not None})
        devices = [f.get("device") for f in self.facts if f.get("hardware") == "gpu" and f.get("device")]
        self.gpu_name: str = devices[0] if devices else ""

    def of_engine(self, item: dict[str, Any]) -> bool:
        """Whether a row, server's facts or side job belongs to the engine the current claim is about (every
        one does when the claim names none)."""
        return not self.engine_scope or item.get("engine") == self.engine_scope


def _matches(row: dict[str, Any], sel: dict[str, Any], ignore_burst: bool = False) -> bool:
    for k, v in sel.items():
        if k == "burst" and ignore_burst:
            continue
        if row.get(k) != v:
            return False
    return True


def select_row(
    ctx: Context, sel: dict[str, Any], allow_burst_fallback: bool, machine: str | None = None
) -> tuple[dict[str, Any] | None, str]:
    """The measured row a selector names; with fallback, the largest measured burst when the exact one is absent.
    Where several servers match, one whose job ran on the machine of boot id ``machine`` comes first. Returns (row,
    note); row None with the reason in note."""
    boots = boot_ids(ctx.facts) if machine else {}

    def _pick(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return sorted(rows, key=lambda r: (other_machines(boots.get(r["server"]), machine), *_pick_key(r)))[0]

    if sel.get("burst") == "largest":  # the largest burst the matching rows measured
        sel = {k: v for k, v in sel.items() if k != "burst"}
        measured = [r for r in ctx.rows if _matches(r, sel) and r.get("status") == "ok"]
        if measured:
            sel = {**sel, "burst": max(r["burst"] for r in measured)}
    exact = [r for r in ctx.rows if _matches(r, sel)]
    ok = [r for r in exact if r.get("status") == "ok" and r.get("throughput_median") is not None]
    if ok:
        return _pick(ok), ""
    if exact:
        return None, exact[0].get("status") or "not measured"
    if allow_burst_fallback and "burst" in sel:
        near = [r for r in ctx.rows if _matches(r, sel, ignore_burst=True) and r.get("status") == "ok"]
        if near:
            top = max(r["burst"] for r in near)
            best = [r for r in near if r["burst"] == top]
            return _pick(best), f"burst {sel['burst']} not in this study; burst {top} shown"
        notrun = [r for r in ctx.rows if _matches(r, sel, ignore_burst=True)]
        if notrun:
            return None, notrun[0].get("status") or "not measured"
    return None, f"no server/condition in this study matches {sel}"


def _pick_key(row: dict[str, Any]) -> tuple[Any, ...]:
    # Several servers can match a loose selector (e.g. lora on, any max_loras): take the smallest max_loras,
    # then the server id, so the choice is stable and visible in the evidence.
    return (row.get("max_loras") or 0, row["server"])


def _metric(row: dict[str, Any], metric: str) -> float | None:
    v = row.get(_METRIC_COLS.get(metric, metric))
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _evidence(row: dict[str, Any]) -> str:
    return f"{row['server']}/{row['condition']}/{row['burst']}"


# Metrics whose ratio between two cells of one job is paired per cycle (stats.ratio_span over PREFIX_by_cycle);
# TTFT across two servers has no interval of its own in the summary, so its ratio there has no span.
_PAIRED_PREFIX = {"throughput_tok_s": "throughput", "ttft_median_ms": "ttft"}

PACED_NOTE_POINTS = 2.0  # a ratio's span wider than ± this, with a host-paced cell, says why (summary.paced_by)


def measure(claim: dict[str, Any], ctx: Context, fallback: bool) -> tuple[Any, str, list[str], Span]:
    """(measured value or None, note, evidence ids, span of a throughput ratio over the repetitions)."""
    if claim["measure"]["kind"] == "ratio":
        return _ratio(claim["measure"], ctx, fallback)
    if claim["measure"]["kind"] == "adapter_scaling":
        return _adapter_scaling(claim["measure"], ctx)
    return (*_single(claim, ctx, fallback), None)


def _ratio(m: dict[str, Any], ctx: Context, fallback: bool) -> tuple[Any, str, list[str], Span]:
    # a study put together from several runs: where a selector matches a server of the other cell's machine, the
    # ratio is taken on one machine (the numerator's server near the denominator's, else the other way round)
    boots = boot_ids(ctx.facts)
    den, n2 = select_row(ctx, m["den"], fallback)
    num, n1 = select_row(ctx, m["num"], fallback, machine=boots.get(den["server"]) if den else None)
    if num is None or den is None:
        return None, n1 or n2, [], None
    if other_machines(boots.get(num["server"]), boots.get(den["server"])):
        near, n2 = select_row(ctx, m["den"], fallback, machine=boots.get(num["server"]))
        den = near or den
    if (num.get("workload") or "default") != (den.get("workload") or "default"):
        return None, f"{_evidence(num)} and {_evidence(den)} send different workloads", [], None
    a, b = _metric(num, m["metric"]), _metric(den, m["metric"])
    if a is None or b is None or b == 0:
        return None, f"{m['metric']} missing", [], None
    note = "; ".join(x for x in {n1, n2} if x)
    value, span = 100.0 * (a / b - 1), None
    prefix = _PAIRED_PREFIX.get(m["metric"])
    if prefix:
        pairs = paired_ratios(num, den, prefix)
        r = ratio_span(num, den, prefix)
        if pairs and r:  # two cells of one job: the median of ratios of measurements taken close together
            value = r[0]
            note = "; ".join(x for x in (note, f"{len(pairs)} pairs of measurements taken close together") if x)
        span = (r[1], r[2]) if r and not math.isnan(r[1]) else None
    if m["metric"] == "throughput_tok_s":
        paced = [x for x in (num.get("throughput_gpu_paced_r"), den.get("throughput_gpu_paced_r")) if x is not None]
        if span and paced and span[1] - span[0] > 2 * PACED_NOTE_POINTS:
            note = "; ".join(x for x in (note, f"host-paced spread: the slow bursts are those in which the GPU "
                                               f"waited for the host (r {max(paced):.2f})") if x)  # fmt: skip
    apart = _apart(boots, num, den)
    note = "; ".join(x for x in (note, apart) if x)
    return value, note, [_evidence(num), _evidence(den)], span


def _apart(boots: dict[str, str], a: dict[str, Any], b: dict[str, Any]) -> str:
    """A note where two cells come from server jobs that ran on different machines (their recorded boot ids,
    ``boots``: resources.boot_ids, differ: a study put together from several runs): each interval holds the spread
    within its job, and the span of their ratio not what differs between the two machines."""
    if a["server"] == b["server"] or not other_machines(boots.get(a["server"]), boots.get(b["server"])):
        return ""
    return f"{a['server']} and {b['server']} ran on different machines, which the span does not cover"


def _adapter_count(row: dict[str, Any]) -> int:
    return len({a for a in str(row.get("adapters") or "").split("|") if a and a != "base"})


def _adapters(n: int) -> str:
    return f"{n} adapter" + ("" if n == 1 else "s")


def _adapter_scaling(m: dict[str, Any], ctx: Context) -> tuple[Any, str, list[str], Span]:
    """Throughput with the most adapters against the fewest, on one server, one assignment (``assignment``) and
    its largest burst, in percent: paired per cycle as ``_ratio`` pairs (the median of the ratios of one cycle's
    bursts and its 95 % interval); where the cells do not pair, the ratio of the medians and the span their
    intervals allow. The server is the one that measured the widest range of adapter counts (ties: the most slots,
    the most max_cpu_loras, then the id)."""
    conds = ctx.summary.get("conditions") or {}
    rows = [
        r
        for r in ctx.rows
        if r.get("engine") == m.get("engine", r.get("engine"))
        and (conds.get(r["condition"]) or {}).get("assignment", "cycle") == m["assignment"]
        and _adapter_count(r) > 0
    ]
    if not rows:
        return None, f"no {m['assignment']} condition over several adapter counts in this study", [], None
    not_ok = [r for r in rows if r.get("status") != "ok"]
    ok = [r for r in rows if r.get("status") == "ok" and r.get("throughput_median")]
    candidates = []
    for server in sorted({r["server"] for r in ok}):
        srv = [r for r in ok if r["server"] == server]
        top = max(r["burst"] for r in srv)
        at = {_adapter_count(r): r for r in srv if r["burst"] == top}
        if len(at) >= 2:
            lo_n, hi_n = min(at), max(at)
            slots = at[lo_n].get("max_loras") or 0
            candidates.append((hi_n / lo_n, slots, at[lo_n].get("max_cpu_loras") or 0, server, at[lo_n], at[hi_n]))
    if not candidates:
        why = not_ok[0].get("status") if not_ok else "needs one server measuring two or more adapter counts"
        return None, str(why), [], None
    _, _, _, server, few, many = sorted(candidates, key=lambda c: (-c[0], -c[1], -c[2], c[3]))[0]
    # stats.ratio_span: paired per cycle where both cells are of one job (the median of the ratios, as _ratio
    # reads them), else the ratio of the medians; both cells have a median, so it gives a ratio
    r = ratio_span(many, few)
    assert r is not None
    value, span = r[0], (None if math.isnan(r[1]) else (r[1], r[2]))
    note = (
        f"{server} (max_loras {few.get('max_loras')}, max_cpu_loras {few.get('max_cpu_loras') or 'default'}), "
        f"{m['assignment']}, burst {few['burst']}: {_adapters(_adapter_count(many))} "
        f"{many['throughput_median']:.0f} tok/s vs {_adapters(_adapter_count(few))} "
        f"{few['throughput_median']:.0f} tok/s"
    )
    pairs = paired_ratios(many, few)
    if pairs:
        note += f"; {len(pairs)} pairs of measurements taken close together"
    slots = few.get("max_loras")
    if slots and min(_adapter_count(many), many["burst"]) > slots:
        note += f"; a burst can hold more distinct adapters than the {slots} slots (S-LoRA has no such per-batch cap)"
    return value, note, [_evidence(many), _evidence(few)], span


def _single(claim: dict[str, Any], ctx: Context, fallback: bool) -> tuple[Any, str, list[str]]:
    m = claim["measure"]
    kind = m["kind"]
    if kind == "none":
        return None, m.get("reason", "external figure"), []
    if kind == "metric":
        row, note = select_row(ctx, m["select"], fallback)
        if row is None:
            return None, note, []
        return _metric(row, m["metric"]), note, [_evidence(row)]
    if kind == "artifact":
        return _artifact(m["key"], ctx)
    if kind == "probe" and m["probe"] == "slot_shortage_defers":
        return _slot_shortage_defers(ctx, m.get("engine"))
    if kind == "probe":
        # a claim about one engine is judged on that engine's servers and jobs only
        ctx.engine_scope = claim_engine(claim)
        return _probe(m["probe"], ctx)
    if kind == "server_fact":
        return _server_fact(m["fact"], m.get("select", {}), ctx)
    raise ValueError(f"claim {claim['id']}: unknown measure kind {kind!r}")


def _artifact(key: str, ctx: Context) -> tuple[Any, str, list[str]]:
    if key == "rank_consistency":
        arch = ctx.reference_arch
        if arch is None:
            return None, "not run: no reference architecture given", []
        targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
        ranks = [r for r in (4, 8, 16, 32, 64) if lora_parameter_count(arch, r, targets) == 3_211_264]
        return (
            (ranks[0] if ranks else None),
            (
                "rank whose q/k/v/o LoRA on the Qwen3-1.7B architecture has 3,211,264 parameters "
                f"(rank 16 would have {lora_parameter_count(arch, 16, targets):,})"
            ),
            ["config/models/qwen3-1.7b.json"],
        )
    if not ctx.adapters:
        return None, "no adapters built", []
    a = ctx.adapters[0]
    vals = {
        "adapter_trainable_params": a["trainable_parameters"],
        "base_params": ctx.model_params,
        "adapter_share_pct": a["share_of_base_pct"],
        "adapter_bf16_mb": a["bytes_bf16"] / 1e6,
    }
    if key not in vals:
        raise ValueError(f"unknown artifact key {key!r}")
    return (
        vals[key],
        f"adapter {a['name']} (rank {a['rank']}, {','.join(a['target_modules'])})",
        [f"adapters/{a['name']}"],
    )


ProbeResult = tuple[Any, str, list[str]]
PROBES: dict[str, Callable[[Context], ProbeResult]] = {}


def probe(*names: str) -> Callable[[Callable[..., ProbeResult]], Callable[..., ProbeResult]]:
    """Register a behaviour probe under the names claims use (``measure: {kind: probe, probe: NAME}``); a probe
    registered under several names gets the name as its second argument."""

    def register(fn: Callable[..., ProbeResult]) -> Callable[..., ProbeResult]:
        for name in names:
            PROBES[name] = functools.partial(_named, fn, name) if len(names) > 1 else fn
        return fn

    return register


def _named(fn: Callable[..., ProbeResult], name: str, ctx: Context) -> ProbeResult:
    return fn(ctx, name)


def _probe(name: str, ctx: Context) -> ProbeResult:
    if name not in PROBES:
        raise ValueError(f"unknown probe {name!r}; known: {sorted(PROBES)}")
    return PROBES[name](ctx)


def _runtime(ctx: Context) -> tuple[dict[str, Any] | None, str]:
    """The first runtime-loading job of the claim's engine that ran, or why there is none."""
    jobs = [r for r in ctx.runtime_all if ctx.of_engine(r)]
    ran = [r for r in jobs if r.get("status") == "ok"]
    if ran:
        return ran[0], ""
    if jobs:
        return None, str(jobs[0].get("status"))
    return (
        None,
        f"no runtime_load of {ctx.engine_scope} in this study" if ctx.engine_scope else "no runtime_load in this study",
    )


@probe("wrong_model_rejected", "models_listed")
def _server_probe(ctx: Context, name: str) -> ProbeResult:
    ok = {s: f for s, f in ctx.raw_facts.items() if f.get("status") == "ok" and ctx.of_engine(f)}
    if name == "wrong_model_rejected":
        vals = {s: f.get("probes", {}).get("wrong_model_rejected") for s, f in ok.items()}
    else:
        vals = {
            s: models_listed_ok(f.get("probes", {}), list((f.get("config") or {}).get("adapters") or []))
            for s, f in ok.items()
        }
    if not vals:
        return None, f"no {ctx.engine_scope} server ran" if ctx.engine_scope else "no server ran", []
    status = {s: f.get("probes", {}).get("wrong_model_status") for s, f in ok.items()}
    note = f"HTTP status per server: {status}" if name == "wrong_model_rejected" else f"{len(vals)} servers"
    return all(vals.values()), note, [f"server:{s}" for s in vals]


def _loaded(ctx: Context) -> tuple[dict[str, Any] | None, str]:
    """The runtime-loading job when every load call succeeded; a refused load times nothing."""
    rt, why = _runtime(ctx)
    if rt and not rt.get("load_ok", True):
        errors = "; ".join(rt.get("load_errors") or [])
        return None, f"{rt.get('loads_ok')} of {len(rt['cycles'])} load calls succeeded ({errors})"
    return rt, why


@probe("cold_slower_than_resident")
def _cold_slower(ctx: Context) -> ProbeResult:
    rt, why = _loaded(ctx)
    if not rt:
        return None, why, []
    cv = cold_vs_resident([c for c in rt["cycles"] if c["load_status"] == 200])
    return (
        cv["slower"],
        (
            f"median latency cold {cv['cold_latency_ms']:.1f} ms vs resident {cv['resident_latency_ms']:.1f} ms "
            f"({100 * (cv['cold_latency_ms'] / cv['resident_latency_ms'] - 1):+.1f}%; counts as slower above "
            f"+{100 * cv['margin']:.1f}%, the resident requests' own range); TTFT cold minus resident "
            f"{cv['ttft_diff_ms_median']:+.1f} ms (median of {cv['cycles']} cycles, paired; higher in "
            f"{cv['ttft_cold_higher']}); warmed new adapter {rt['warm_latency_ms_median']:.1f} ms"
        ),
        [f"runtime_load:{rt['server']}"],
    )


@probe("runtime_load_seconds")
def _load_seconds(ctx: Context) -> ProbeResult:
    rt, why = _loaded(ctx)
    if not rt:
        return None, why, []
    return (
        rt["load_s_median"],
        f"median of {len(rt['cycles'])} load calls (HTTP round trip)",
        [f"runtime_load:{rt['server']}"],
    )


@probe("prefix_cache_separate_per_adapter", "prefix_cache_reused_same_model")
def _prefix_cache(ctx: Context, name: str) -> ProbeResult:
    """The first prefix-caching job (of the claim's engine, where it names one) that ran."""
    jobs = [p for p in ctx.prefix_all if not ctx.engine_scope or p.get("engine") == ctx.engine_scope]
    ran = [p for p in jobs if p.get("status") == "ok"]
    if not ran:
        why = "; ".join(f"{p['server']}: {p['status']}" for p in jobs) or (
            f"no prefix_cache job of {ctx.engine_scope} in this study" if ctx.engine_scope else "no prefix_cache"
        )
        return None, why, []
    pc = ran[0]
    if not pc.get("cached_tokens_reported"):
        return None, f"{pc['server']}: the engine does not report cached prompt tokens", ["prefix_cache"]
    shares = "; ".join(
        f"{p['first']} then {p['second']}: {100 * (p['second_cached_share'] or 0):.0f} % cached" for p in pc["pairs"]
    )
    if name == "prefix_cache_reused_same_model":
        return pc["caches_prefixes"], f"{pc['server']}, median of {pc['repeats']}: {shares}", ["prefix_cache"]
    if not pc["caches_prefixes"]:
        return None, f"{pc['server']}: no prefix reused even for the same model ({shares})", ["prefix_cache"]
    return pc["separate_per_adapter"], f"{pc['server']}, median of {pc['repeats']}: {shares}", ["prefix_cache"]


@probe("max_cpu_loras_below_max_loras_rejected")
def _cpu_loras_refused(ctx: Context) -> ProbeResult:
    rt, why = _runtime(ctx)
    if not rt or not rt.get("max_cpu_loras_probe"):
        return None, why if not rt else "engine has no max_cpu_loras", []
    p = rt["max_cpu_loras_probe"]
    return (
        p["refused"],
        f"max_loras {p['max_loras']}, max_cpu_loras {p['max_cpu_loras']}: {p['detail']}",
        [f"runtime_load:{rt['server']}"],
    )


@probe("readiness_seconds_lora_vs_off")
def _readiness_lora_vs_off(ctx: Context) -> ProbeResult:
    facts = [f for f in ctx.facts if ctx.of_engine(f)]
    on = [f["readiness_s"] for f in facts if f.get("lora") and f.get("readiness_s")]
    off = [f["readiness_s"] for f in facts if f.get("lora") is False and f.get("readiness_s")]
    if not on or not off:
        return None, "needs a LoRA-on and a LoRA-off server", []
    a, b = statistics.median(on), statistics.median(off)
    return a > b, f"median readiness LoRA on {a:.1f} s vs off {b:.1f} s", ["server_facts"]


@probe("first_measurement_low")
def _first_low(ctx: Context) -> ProbeResult:
    rows = [
        r
        for r in ctx.rows
        if r.get("lora")
        and ctx.of_engine(r)
        and r.get("condition") != "base"
        and r.get("status") == "ok"
        and r.get("warmup_throughput")
        and r.get("throughput_min")
    ]
    if not rows:
        return None, "no adapter rows measured", []
    low = [r for r in rows if r["warmup_throughput"] < r["throughput_min"]]
    return (
        len(low) * 2 > len(rows),
        f"first (warm-up) burst below every measured repetition in {len(low)} of {len(rows)} adapter rows",
        [_evidence(r) for r in low[:4]],
    )


def _slot_shortage_defers(ctx: Context, engine: str | None) -> tuple[Any, str, list[str]]:
    """With more distinct adapters than slots, are requests held back (deferred, or waiting where the engine has
    no deferral gauge) and is the running batch smaller than on enough slots, beyond both 95 % intervals?"""
    from .queues import cliff_sentence, sampled_during

    if ctx.queues is None:
        return None, "no queue figures in this study", []
    cliffs = [c for c in ctx.queues.get("cliffs") or [] if engine in (None, c["engine"])]
    if not cliffs:
        return None, "needs two LoRA servers of one engine with different slots and a condition between them", []
    c = cliffs[0]
    evidence = [f"queues:{c['few']['server']}/{c['condition']}/{c['burst']}", f"queues:{c['many']['server']}"]
    text = cliff_sentence(c)
    if c["finding"] == "too few samples":
        # measured, but too few samples to tell (inconclusive); never sampled in flight at all: not run
        return (Inconclusive(text), text, evidence) if sampled_during(c) else (None, text, [])
    if c["finding"] == "overlap":
        return Inconclusive(text), text, evidence
    held = (c.get("queued_few") or 0) > 0
    return (c["finding"] == "smaller batch" and held), text, evidence


def _server_fact(fact: str, sel: dict[str, Any], ctx: Context) -> tuple[Any, str, list[str]]:
    col = {
        "gpu_memory_mib": "gpu_mem_ready_mib",
        "readiness_s": "readiness_s",
        "cuda_graph_captures": "cuda_graph_captures",
    }[fact]
    rows = [f for f in ctx.facts if all(f.get(k) == v for k, v in sel.items() if k not in ("condition", "burst"))]
    ran = [f for f in rows if f.get("status") == "ok"]
    if not ran:
        return None, (rows[0]["status"] if rows else f"no server matches {sel}"), []
    if fact == "cuda_graph_captures":
        # vLLM captures PIECEWISE graphs and, in newer versions, FULL graphs too; published counts are the
        # PIECEWISE ones (one per batch size, per LoRA state), so that is the comparable figure.
        piece = [
            (ctx.raw_facts.get(f["server"], {}).get("log", {}).get("cuda_graph_bars") or {}).get("PIECEWISE")
            for f in ran
        ]
        counts = [int(p) for p in piece if p is not None]
        if counts and len(counts) == len(piece):
            total = [f[col] for f in ran]
            return (
                _median(counts),
                f"PIECEWISE captures (all modes: {total})",
                [f"server:{f['server']}" for f in ran],
            )
    vals = [f[col] for f in ran if f.get(col) is not None]
    if not vals:
        why = "no GPU on this machine" if fact == "gpu_memory_mib" and ctx.hardware == "cpu" else f"{col} not reported"
        if fact == "cuda_graph_captures" and ctx.hardware == "cpu":
            why = "no CUDA graphs on a CPU build"
        return None, why, []
    return _median(vals), f"median over {len(vals)} server(s)", [f"server:{f['server']}" for f in ran]


def _median(vals: list[Any]) -> Any:
    """The median of servers' figures; of whole numbers (captures, MiB) a whole number where it is one, so that
    two servers' 38 and 38 captures read 38, not 38.0."""
    m = statistics.median(vals)
    return int(m) if all(isinstance(v, int) for v in vals) and float(m).is_integer() else m


def comparability(claim: dict[str, Any], ctx: Context) -> str:
    """'' when comparable, else the plain reason."""
    scope = claim.get("scope") or {}
    if claim["measure"]["kind"] == "none":
        return "external figure from another system; nothing here measures it"
    if claim["measure"]["kind"] == "artifact" and claim["measure"]["key"] == "rank_consistency":
        return ""
    reasons = []
    if scope.get("hardware") == "gpu" and ctx.hardware != "gpu":
        reasons.append(
            f"claim measured on a GPU ({(claim.get('context') or {}).get('hardware', 'GPU')}); this run: CPU"
        )
    claim_hw = str((claim.get("context") or {}).get("hardware") or "")
    kind = claim["measure"]["kind"]
    if (
        ctx.hardware == "gpu"
        and kind in ("metric", "server_fact")
        and claim["claimed"].get("unit") in ABSOLUTE_UNITS
        and ctx.gpu_name
        and ctx.gpu_name.split()[-1] not in claim_hw
    ):
        reasons.append(f"absolute figure measured on {claim_hw or 'other hardware'}; this run: {ctx.gpu_name}")
    mp = other_model(claim, ctx)
    if mp and not analogue(claim, ctx):
        reasons.append(f"claim's model has {mp:,} parameters; this run's has {ctx.model_params:,}")
    return "; ".join(reasons)


def other_model(claim: dict[str, Any], ctx: Context) -> int | None:
    """The parameter count of the claim's model where it differs from this run's by more than 1 %, else None."""
    mp = (claim.get("scope") or {}).get("model_params")
    return int(mp) if mp and ctx.model_params and abs(ctx.model_params - mp) / mp > 0.01 else None


def analogue(claim: dict[str, Any], ctx: Context) -> bool:
    """Whether a claim about a ratio is judged on a study model of another size that stands in for the claim's
    (config ``analogue_model``: on an H200 the source's laptop-GPU setting is matched by a model the GPU is busy
    with, not by the same model)."""
    return ctx.analogue_model and claim["measure"]["kind"] == "ratio"


def apply_rule(claim: dict[str, Any], value: Any) -> str:
    """reproduced / direction only / contradicted for one measured value. "direction only" exists only for
    percent changes (ratio claims): a spread or an absolute figure has no direction."""
    rule = claim["rule"]
    directional = claim.get("measure", {}).get("kind") == "ratio"
    t = str(rule["type"])
    c = claim["claimed"]
    if t == "true":
        return "reproduced" if bool(value) == bool(c.get("value", True)) else "contradicted"
    if t == "equals":
        return "reproduced" if value == c["value"] else "contradicted"
    if t == "less_than":
        return "reproduced" if value < rule["value"] else "contradicted"
    if t == "greater_than":
        return "reproduced" if value > rule["value"] else "contradicted"
    tol = float(rule.get("tolerance", 0))
    if t == "within":
        target = float(c["value"])
        if abs(value - target) <= tol:
            return "reproduced"
        return "direction only" if directional and value * target > 0 else "contradicted"
    if t == "range":
        lo, hi = float(c["low"]), float(c["high"])
        if lo - tol <= value <= hi + tol:
            return "reproduced"
        mid = (lo + hi) / 2
        return "direction only" if directional and value * mid > 0 else "contradicted"
    raise ValueError(f"claim {claim['id']}: unknown rule type {t!r}")


def _decide_threshold(
    rule: dict[str, Any], value: float, span: tuple[float, float], rule_result: str | None, note: str
) -> tuple[str, str]:
    """Verdict and reason of a ``decisive`` threshold claim (less_than / greater_than ``value``) whose span crosses
    its threshold: such a claim is decided only by a span wholly on one side, except where the rule names a
    ``negligible`` margin (points) and the span reaches less than that margin onto the claim's side: the effect
    the claim asserts, if there is one, is smaller than the margin, so the claim of an effect is contradicted (an
    equivalence bound, fixed in the registry before the data). Otherwise inconclusive."""
    t = float(rule["value"])
    tail = f"; {note}" if note else ""
    margin = rule.get("negligible")
    if margin is not None:
        reach = t - span[0] if rule["type"] == "less_than" else span[1] - t
        if reach < float(margin):
            return "contradicted", (
                f"median {_fmt(value)}%; our intervals span {span[0]:.1f}% to {span[1]:.1f}%, across {t:g}% but "
                f"within {float(margin):g} points of it on the claim's side: any effect is below the registry's "
                f"negligible margin of {float(margin):g} points" + tail
            )
    return "inconclusive", (
        f"median {_fmt(value)}% ({rule_result} by the rule), but our intervals span {span[0]:.1f}% to "
        f"{span[1]:.1f}%, across {t:g}%"
        + (f" and more than {float(margin):g} points onto the claim's side" if margin is not None else "")
        + tail
    )


def _below_margin(rule: dict[str, Any], span: tuple[float, float]) -> str:
    """For a ``decisive`` threshold claim reproduced by a span wholly on its side: a sentence saying so where the
    whole span stays within the rule's ``negligible`` margin of the threshold (an effect that is there but smaller
    than the margin, which a reader of "reproduced" alone would not guess); else ""."""
    margin = rule.get("negligible")
    if not rule.get("decisive") or margin is None or rule.get("type") not in ("less_than", "greater_than"):
        return ""
    t = float(rule["value"])
    reach = t - span[0] if rule["type"] == "less_than" else span[1] - t
    if reach >= float(margin):
        return ""
    return (
        f"our intervals span {span[0]:.1f}% to {span[1]:.1f}%, wholly on the claim's side of {t:g}% but within "
        f"{float(margin):g} points of it: the effect is there, smaller than the registry's negligible margin of "
        f"{float(margin):g} points"
    )


def evaluate(claims: list[dict[str, Any]], ctx: Context) -> list[Verdict]:
    out = []
    for claim in claims:
        reason = comparability(claim, ctx)
        value, note, evidence, span = measure(claim, ctx, fallback=bool(reason) or analogue(claim, ctx))
        rule_result = None if value is None or isinstance(value, Inconclusive) else apply_rule(claim, value)
        if isinstance(value, Inconclusive):
            verdict = "not comparable" if reason else "inconclusive"
            why = f"{reason}. {note}" if reason else note
            value = None
        elif claim["measure"]["kind"] == "none":
            verdict = "not comparable"
            why = f"{reason}: {note}"
        elif value is None:
            verdict = "not run"
            why = note
        elif reason:
            verdict = "not comparable"
            why = reason + (
                f". For reference, this run: {_fmt(value)} ({rule_result} under the claim's rule)"
                + (f"; {note}" if note else "")
            )
        else:
            verdict = rule_result or "not run"
            why = note
            mp = other_model(claim, ctx)
            if mp and analogue(claim, ctx):
                why = (f"judged on this study's {ctx.model_params:,}-parameter model, standing in for the claim's "
                       f"{mp:,} (analogue_model)" + (f"; {note}" if note else ""))  # fmt: skip
            rule = claim["rule"]
            if (span and verdict in ("reproduced", "contradicted") and rule.get("decisive") and "value" in rule
                    and span[0] <= float(rule["value"]) <= span[1]):  # fmt: skip
                verdict, why = _decide_threshold(rule, value, span, rule_result, note)
            elif span and verdict == "reproduced":
                small = _below_margin(rule, span)
                why = f"{why}; {small}" if why and small else (small or why)
            if span and verdict in ("direction only", "contradicted"):
                c = claim["claimed"]
                lo, hi = (c["low"], c["high"]) if "low" in c else (c.get("value"), c.get("value"))
                if c.get("unit") == "pct" and lo is not None and hi is not None and hi >= span[0] and lo <= span[1]:
                    verdict = "inconclusive"
                    why = (
                        f"median {_fmt(value)}% misses the claim ({rule_result} by the rule), but our span "
                        f"runs from {span[0]:.1f}% to {span[1]:.1f}%, which includes it" + (f"; {note}" if note else "")
                    )
        out.append(
            Verdict(
                id=claim["id"],
                source=claim["source"],
                section=str(claim["section"]),
                statement=claim["statement"],
                claimed=claim["claimed"],
                context=claim.get("context"),
                measure=claim["measure"],
                rule=claim["rule"],
                measured=value,
                measured_text=_fmt(value),
                claimed_text=_fmt_claim(claim["claimed"]),
                rule_result=rule_result,
                verdict=verdict,
                why=why,
                evidence=evidence,
                finding=claim.get("finding") or None,
                engine=claim_engine(claim),
                # how stable the figure is, beside it: the span the verdict was tested against
                span=span if value is not None else None,
            )
        )
    return out


_fmt = fmt_num  # claims' texts: 3 decimals below 1, else 1


def _fmt_claim(c: dict[str, Any]) -> str:
    unit = {"pct": "%", "tok_s": " tok/s", "ms": " ms", "s": " s", "MiB": " MiB", "MB": " MB"}.get(
        str(c.get("unit")), ""
    )
    if "low" in c:
        return f"{_fmt(c['low'])} to {_fmt(c['high'])}{unit}"
    return f"{_fmt(c.get('value'))}{unit}"


def load_claims(path: str | Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(Path(path).read_text())
    claims = data["claims"]
    ids = [c["id"] for c in claims]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"{path}: duplicate claim ids {sorted(dup)}")
    for c in claims:
        for key in ("id", "source", "section", "statement", "claimed", "measure", "rule"):
            if key not in c:
                raise ValueError(f"{path}: claim {c.get('id', '?')} lacks '{key}'")
        if "finding" in c and not isinstance(c["finding"], str):
            raise ValueError(
                f"{path}: claim {c['id']}: finding must be the key of a report finding, not {c['finding']!r}"
            )
    return claims


def claim_engine(claim: dict[str, Any]) -> str | None:
    """The engine a registry entry is about: its measure's, else its scope's; None when it names none."""
    return claim["measure"].get("engine") or (claim.get("scope") or {}).get("engine") or None


def claim_engines(claims: Iterable[dict[str, Any] | Verdict]) -> dict[str, str | None]:
    """Claim id -> the engine it is about (registry entries or verdicts; a verdict file written before verdicts
    named their engine gives its measure's)."""
    out: dict[str, str | None] = {}
    for c in claims:
        if isinstance(c, Verdict):
            out[c.id] = c.engine
        else:
            out[c["id"]] = c.get("engine") or claim_engine(c)
    return out


def finding_links(claims: Iterable[dict[str, Any] | Verdict]) -> dict[str, list[str]]:
    """The claims each report finding carries, by the finding's key: every claim (registry entry or verdict) that
    names it under ``finding``, in registry order."""
    links: dict[str, list[str]] = {}
    for c in claims:
        finding, cid = (c.finding, c.id) if isinstance(c, Verdict) else (c.get("finding"), c["id"])
        if finding:
            links.setdefault(finding, []).append(cid)
    return links


def evaluate_file(
    claims_path: str,
    summary_path: str,
    model_path: str,
    adapter_paths: list[str],
    out_path: str,
    reference_arch_path: str | None = None,
    queues_path: str | None = None,
    analogue_model: bool = False,
) -> list[Verdict]:
    ref = read_json(reference_arch_path) if reference_arch_path else None
    queues = read_json(queues_path) if queues_path else None
    adapters = [read_json(p) for p in adapter_paths]
    ctx = Context(read_json(summary_path), read_json(model_path), adapters, ref, queues, analogue_model)
    results = evaluate(load_claims(claims_path), ctx)
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICTS}
    claims = [r.to_json() for r in results]
    write_json(
        out_path, {"hardware": ctx.hardware, "model_params": ctx.model_params, "counts": counts, "claims": claims}
    )
    log.info("claims: %s", ", ".join(f"{k} {v}" for k, v in counts.items()))
    return results
