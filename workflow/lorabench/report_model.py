"""The report's model: what each section of the HTML report shows, computed from a study's saved tables (summary
JSON, verdicts, queues, manifests), with the findings and the plots. report.py renders it; nothing here renders.
"""

from __future__ import annotations

import logging
import math
import shutil
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import plots, provenance, stats
from .claims import claim_engines, finding_links
from .config import schema_default
from .engines import get_engine
from .io import read_json
from .job import server_job
from .loadgen.traffic import workload_of
from .phases import workload_rows
from .queues import cliff_sentence
from .records import AA_POINTS, Comparison, ServerComparison
from .resources import boot_ids, other_machines
from .roles import adapter_set, role_conditions
from .summary import thread_bound

log = logging.getLogger(__name__)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def gpu_bandwidths(path: str | Path) -> list[tuple[str, float]]:
    """Peak memory bandwidth (bytes/s) by GPU name fragment, in the order matched, from the hardware file
    (config ``hardware_specs``: ``gpus``, each with ``match`` and ``memory_bandwidth_gb_s``)."""
    gpus = (yaml.safe_load(Path(path).read_text()) or {}).get("gpus") or []
    out = []
    for i, g in enumerate(gpus):
        if not isinstance(g, dict) or not isinstance(g.get("match"), str):
            raise ValueError(f"{path}: gpus[{i}] lacks 'match' (a part of the device name)")
        bw = g.get("memory_bandwidth_gb_s")
        if isinstance(bw, bool) or not isinstance(bw, (int, float)) or bw <= 0:
            raise ValueError(f"{path}: gpus[{i}].memory_bandwidth_gb_s: {bw!r} is not a positive number")
        out.append((g["match"], float(bw) * 1e9))
    return out


def roofline(
    rows: list[dict[str, Any]],
    facts: list[dict[str, Any]],
    model: dict[str, Any],
    bandwidths: list[tuple[str, float]],
) -> None:
    """Add the memory-bandwidth bound on decode tokens/s (batch = burst, weights read once per step); the GPU's
    bandwidth is that of the first entry of ``bandwidths`` (gpu_bandwidths) whose name fragment its device has."""
    dev = {f["server"]: (f.get("device") or "") for f in facts}
    weight_bytes = (model.get("parameters") or 0) * DTYPE_BYTES.get(model.get("dtype") or "bfloat16", 2)
    for r in rows:
        bw = next((b for k, b in bandwidths if k in dev.get(r["server"], "")), None)
        if bw and weight_bytes and r.get("burst"):
            r["roofline_tok_s"] = r["burst"] * bw / weight_bytes
            if r.get("throughput_median"):
                r["roofline_share_pct"] = 100 * r["throughput_median"] / r["roofline_tok_s"]


@dataclass
class ReportInputs:
    """What a report is built from: a study's saved results, read once (``read``)."""

    study: str
    config: dict[str, Any]
    summary: dict[str, Any]
    verdicts: dict[str, Any]
    model: dict[str, Any]
    adapters: list[dict[str, Any]]
    envs: list[dict[str, Any]]
    queues: dict[str, Any]
    capacity: dict[str, Any] | None = None  # capacity.json of the rate sweeps (capacity.capacity_model)
    capacity_plots: Path | None = None  # the folder of its plots

    @classmethod
    def read(
        cls,
        study: str,
        config: dict[str, Any],
        summary_path: str,
        verdicts_path: str,
        model_path: str,
        adapter_paths: list[str],
        env_paths: list[str],
        queues_path: str | None = None,
        capacity_path: str | None = None,
    ) -> ReportInputs:
        return cls(
            study=study,
            config=config,
            summary=read_json(summary_path),
            verdicts=read_json(verdicts_path),
            model=read_json(model_path),
            adapters=[read_json(p) for p in adapter_paths],
            envs=[read_json(p) for p in env_paths],
            queues=read_json(queues_path) if queues_path else {"servers": [], "cliffs": []},
            capacity=read_json(capacity_path) if capacity_path else None,
            capacity_plots=Path(capacity_path).parent / "plots" if capacity_path else None,
        )


@dataclass
class ReportModel:
    """Everything the templates show, by section, computed from the study's tables; the templates only render it
    (report/templates/report.html.j2 includes one file of sections/ per section). ``context`` is what they read."""

    header: dict[str, Any]
    findings: list[dict[str, Any]]
    cost: dict[str, Any]
    slots: dict[str, Any]
    engines: dict[str, Any]
    capacity: dict[str, Any]
    side_jobs: dict[str, Any]
    facts: dict[str, Any]
    claims: dict[str, Any]
    provenance: dict[str, Any]
    decisions_fig: str | None = None  # the effects between servers (plots.effects), first in the findings

    def context(self) -> dict[str, Any]:
        """The sections' fields as one namespace (the names the templates use)."""
        out: dict[str, Any] = {"findings": self.findings, "aa_points": AA_POINTS, "decisions_fig": self.decisions_fig}
        parts = (
            self.header,
            self.cost,
            self.slots,
            self.engines,
            self.capacity,
            self.side_jobs,
            self.facts,
            self.claims,
        )
        for part in parts:
            out.update(part)
        out["prov"] = self.provenance
        return out


def build(inputs: ReportInputs, out_dir: Path, checkout: Path, hardware_path: str | Path | None = None) -> ReportModel:
    """The report's model from a study's saved results: tables, findings, verdicts by section and provenance. The
    plots are written into ``out_dir`` (the report's folder; old ones removed); the GPU figures of the roofline come
    from ``hardware_path`` (default: the config's ``hardware_specs``); which condition answers which finding from the
    conditions' roles (roles.py), the claims of each finding from the verdicts (their registry's ``finding``)."""
    config, summary, verdicts, queues = inputs.config, inputs.summary, inputs.verdicts, inputs.queues
    model, adapters, envs = inputs.model, inputs.adapters, inputs.envs
    for c in queues.get("cliffs", []):
        c["sentence"] = cliff_sentence(c)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):
        old.unlink()
    rows = summary["rows"]
    roofline(
        rows, summary["facts"], model, gpu_bandwidths(hardware_path or _config_file(config, "hardware_specs", checkout))
    )
    base = role_conditions(config).get("base")
    figures = []
    for burst in sorted({r["burst"] for r in rows}):
        p = plots.throughput_by_condition(rows, out_dir / f"throughput_burst{burst}.png", burst)
        if p:
            figures.append(
                {
                    "file": p.name,
                    "caption": f"Throughput per condition and server, burst of {burst}; "
                    "bars are medians, whiskers min-max over repetitions.",
                }
            )
    decisions_fig = plots.effects(
        decision_effects(rows, summary, base), out_dir / "decisions.png", "Effects between servers"
    )
    slot_fig = plots.slot_cliff(rows, out_dir / "slot_cliff.png", skip=base)
    ttft_fig = plots.latency_spread(
        summary.get("measurements", []), out_dir / "ttft.png", "ttft_median_ms", "TTFT median (ms)"
    )
    itl_fig = plots.latency_spread(
        summary.get("measurements", []), out_dir / "itl.png", "itl_median_ms", "ITL median (ms)"
    )
    adapter_conditions = [c for c in config.get("conditions", {}) if c != base]
    queue_fig = plots.queue_traces(queues, out_dir / "queues.png", adapter_conditions)
    queue_rows = [
        {**{k: v for k, v in c.items() if k != "traces"}, "server": s["server"], "max_loras": s.get("max_loras")}
        for s in sorted(queues.get("servers", []), key=lambda s: (s["engine"], s.get("max_loras") or 0, s["server"]))
        if s.get("lora") and s.get("status") == "ok"
        for c in s["cells"]
        if c["condition"] != base
    ]
    many_rows = many_adapter_rows(rows, queues, config.get("conditions", {}))
    many_fig = plots.adapter_scaling(many_rows, out_dir / "many_adapters.png")
    prov = provenance.collect(config, model, adapters, envs, summary.get("server_facts_raw", {}), checkout)
    workloads = workload_rows(config, rows)
    measurement = next(
        (f["measurement"] for f in summary.get("server_facts_raw", {}).values() if f.get("measurement")),
        None,
    ) or _config_measurement(config)
    return ReportModel(
        header={
            "study": inputs.study,
            "summary": summary,
            "model": model,
            "adapters": adapters,
            "envs": envs,
            "measurement": measurement,
            "conditions": summary.get("conditions", {}),
            "base_conditions": sorted(c for c, v in (config.get("conditions") or {}).items() if not adapter_set(v)),
            "engines_in_study": sorted({r["engine"] for r in rows}),
        },
        decisions_fig=decisions_fig.name if decisions_fig else None,
        findings=findings(
            rows,
            summary.get("runtime", []),
            summary.get("engine_comparison") or [],
            summary.get("prefix_cache", []),
            summary.get("facts", []),
            summary.get("comparisons", []),
            config=config,
            links=finding_links(verdicts["claims"]),
            claim_engines=claim_engines(verdicts["claims"]),
            capacity=inputs.capacity,
            server_comparisons=summary.get("server_comparisons") or [],
        ),
        cost={
            "rows": rows,
            "figures": figures,
            "ttft_fig": ttft_fig.name if ttft_fig else None,
            "itl_fig": itl_fig.name if itl_fig else None,
            "workloads": workloads,
            "many_workloads": len(workloads) > 1,
            "condition_workloads": {c: workload_of(v) for c, v in (config.get("conditions") or {}).items()},
            "phases": summary.get("phases") or [],
            "stability": stability(rows),
        },
        slots={
            "slot_rows": [r for r in rows if r.get("lora") and r.get("max_loras")],
            "slot_fig": slot_fig.name if slot_fig else None,
            "queues": queues,
            "queue_rows": queue_rows,
            "queue_fig": queue_fig.name if queue_fig else None,
            "many_rows": many_rows,
            "many_fig": many_fig.name if many_fig else None,
            "ranks": rank_rows(rows, adapters, base, _union_engines(rows)),
            "warm_cold": summary.get("warm_cold") or [],
        },
        engines={"engine_comparison": _engine_rows(summary)},
        capacity={"capacity": _capacity_section(inputs, out_dir)},
        side_jobs={"runtime": summary.get("runtime", []), "prefix": summary.get("prefix_cache", [])},
        facts={"facts": summary["facts"]},
        claims={
            "verdicts": verdicts,
            "many_verdicts": many_adapter_verdicts(verdicts["claims"], config),
            "sections": sorted({c["section"] for c in verdicts["claims"]}),
        },
        provenance=prov,
    )


def decision_effects(
    rows: list[dict[str, Any]], summary: dict[str, Any], base: str | None
) -> list[tuple[str, float, float, float, bool]]:
    """The effects between servers a user chooses by, for the report's first chart (plots.effects): what enabling
    LoRA costs (each LoRA server's base-model cell against its engine's LoRA-off server's, at each burst), engine
    against engine (summary ``engine_comparison``) and every other comparison between co-resident servers (``server_
    comparisons``, A/A pairs marked), each with its interval and whether it was paired per cycle."""
    out: list[tuple[str, float, float, float, bool]] = []
    seen = set()

    def add(label: str, span: Iterable[Any], paired: bool) -> None:
        pct, lo, hi = (float("nan") if v is None else float(v) for v in span)
        out.append((label, pct, lo, hi, paired))

    ok = [r for r in rows if r.get("status") == "ok" and r.get("throughput_median")]
    for r in ok:
        if not base or r["condition"] != base or not r.get("lora"):
            continue
        for off in (x for x in ok if x["engine"] == r["engine"] and x["burst"] == r["burst"] and not x.get("lora")):
            if off["condition"] != base or (span := stats.ratio_span(r, off)) is None:
                continue
            seen.add((r["server"], off["server"], base, r["burst"]))
            add(f"LoRA on: {r['server']} vs {off['server']}, burst {r['burst']}", span,
                bool(stats.paired_ratios(r, off)))  # fmt: skip
    for c in summary.get("engine_comparison") or []:
        seen.add((c["b_server"], c["a_server"], c["condition"], c["burst"]))
        add(
            f"{c['b_server']} vs {c['a_server']}, {c['condition']}, burst {c['burst']}",
            (c["ratio_pct"], c["ratio_lo_pct"], c["ratio_hi_pct"]),
            c.get("paired_by", "unpaired") != "unpaired",
        )
    for c in summary.get("server_comparisons") or []:
        if (c["server"], c["reference_server"], c["condition"], c["burst"]) not in seen:
            aa = " (A/A)" if c.get("aa") else ""
            add(
                f"{c['server']} vs {c['reference_server']}{aa}, {c['condition']}, burst {c['burst']}",
                (c["ratio_pct"], c["ratio_lo_pct"], c["ratio_hi_pct"]),
                c["paired_by"] != "unpaired",
            )
    return out


def _capacity_section(inputs: ReportInputs, out_dir: Path) -> dict[str, Any] | None:
    """The rate sweeps' capacity tables, their plots copied beside the report (capacity-NAME.png)."""
    cap = inputs.capacity
    if not cap or not cap.get("slo"):
        return cap
    plots_in = cap.get("plots") or {}
    names = [plots_in.get("capacity")] + [f for by in (plots_in.get("latency") or {}).values() for f in by.values()]
    for name in (n for n in names if n):
        src = (inputs.capacity_plots or Path()) / name
        if src.exists():
            shutil.copyfile(src, out_dir / f"capacity-{name}")
    renamed = {
        "capacity": f"capacity-{plots_in['capacity']}" if plots_in.get("capacity") else None,
        "latency": {
            m: {k: f"capacity-{f}" for k, f in by.items()} for m, by in (plots_in.get("latency") or {}).items()
        },
    }
    return {**cap, "plots": renamed}


def _config_file(config: dict[str, Any], key: str, checkout: Path) -> Path:
    """A file the config names (its default from the schema, for a config saved before the key existed): as the
    path reads from the working directory, else in the ``checkout`` (a report re-rendered from a bundle)."""
    name = config.get(key) or schema_default(key)
    return Path(name) if Path(name).exists() else checkout / name


def _config_measurement(config: dict[str, Any]) -> dict[str, Any]:
    """How the config asks its servers to be measured, for a report none of whose servers has measured yet."""
    servers = list(config.get("servers") or {})
    if not servers:
        return {}
    try:
        return server_job(config, servers[0], hardware="").measurement_facts()
    except (KeyError, TypeError, ValueError):
        return {}


def rank_rows(
    rows: list[dict[str, Any]],
    adapters: list[dict[str, Any]],
    base_condition: str | None,
    union_engines: Iterable[str] = (),
) -> dict[str, list[dict[str, Any]]]:
    """Cost per rank and targets: each one-adapter condition against the same server's ``base_condition`` (the
    base model's; roles.role_conditions), and the cost of rank headroom: the same condition on servers of one
    engine started with different max_lora_rank (the larger over the smaller). Empty unless the study varies
    rank, targets or max_lora_rank. ``union``: the servers of ``union_engines`` (engine kinds, as rows name them,
    whose LoRA layers cover the union of the served adapters' targets: ``_union_engines``) whose measured adapters
    differ in their targets, grouped by that union: there an adapter's targets are not what its requests run
    over."""
    man = {a["name"]: a for a in adapters}
    ok = [r for r in rows if r.get("status") == "ok" and r.get("throughput_median") and r.get("lora")]
    single = [r for r in ok if len(r.get("adapters", "").split("|")) == 1 and r.get("adapters") in man]
    kinds = {(man[r["adapters"]]["rank"], tuple(man[r["adapters"]]["target_modules"])) for r in single}
    headroom_engines = {
        e for e in {r["engine"] for r in ok} if len({r.get("max_lora_rank") for r in ok if r["engine"] == e}) > 1
    }
    if len(kinds) < 2 and not headroom_engines:
        return {"cost": [], "headroom": [], "union": []}
    cost = []
    for r in single:
        base = next(
            (
                b
                for b in ok
                if b["server"] == r["server"] and b["burst"] == r["burst"] and b["condition"] == base_condition
            ),
            None,
        )
        a = man[r["adapters"]]
        row = {"server": r["server"], "engine": r["engine"], "max_lora_rank": r.get("max_lora_rank"),
               "condition": r["condition"], "burst": r["burst"], "rank": a["rank"],
               "targets": ",".join(t.removesuffix("_proj") for t in a["target_modules"]),
               "params": a["trainable_parameters"], "tok_s": r["throughput_median"]}  # fmt: skip
        if base:
            m, lo, hi = _ratio(r, base)
            row.update(pct=m, lo=lo, hi=hi, finding=_stable(lo, hi))
        cost.append(row)
    headroom = []
    for engine in sorted(headroom_engines):
        eng = [r for r in single if r["engine"] == engine]
        for cond, burst in sorted({(r["condition"], r["burst"]) for r in eng}):
            by_rank = sorted((r for r in eng if (r["condition"], r["burst"]) == (cond, burst)),
                             key=lambda r: r.get("max_lora_rank") or 0)  # fmt: skip
            if len(by_rank) < 2 or by_rank[0].get("max_lora_rank") == by_rank[-1].get("max_lora_rank"):
                continue
            small, big = by_rank[0], by_rank[-1]
            m, lo, hi = _ratio(big, small)
            headroom.append(
                {
                    "engine": engine,
                    "condition": cond,
                    "burst": burst,
                    "rank": man[small["adapters"]]["rank"],
                    "small": small["server"],
                    "small_rank": small.get("max_lora_rank"),
                    "big": big["server"],
                    "big_rank": big.get("max_lora_rank"),
                    "small_tok_s": small["throughput_median"],
                    "big_tok_s": big["throughput_median"],
                    "pct": m,
                    "lo": lo,
                    "hi": hi,
                    "finding": _stable(lo, hi),
                }
            )
    cost.sort(key=lambda r: (r["server"], r["burst"], r["rank"], r["targets"]))
    by_union: dict[str, list[str]] = {}
    unions = set(union_engines)
    for server in sorted({r["server"] for r in single if r["engine"] in unions}):
        sets = {tuple(man[r["adapters"]]["target_modules"]) for r in single if r["server"] == server}
        if len(sets) > 1:
            every = sorted({m for s in sets for m in s}, key=_module_order)
            by_union.setdefault(",".join(m.removesuffix("_proj") for m in every), []).append(server)
    union = [{"servers": servers, "targets": targets} for targets, servers in sorted(by_union.items())]
    return {"cost": cost, "headroom": headroom, "union": union}


_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _module_order(m: str) -> tuple[int, str]:
    return (_MODULES.index(m) if m in _MODULES else len(_MODULES), m)


POPULARITY = ("uniform", "distinct", "zipf")


def drawn(cond: dict[str, Any] | None) -> bool:
    """A condition whose adapters are drawn per request from a popularity law: the "Many adapters" section's."""
    return (cond or {}).get("assignment") in POPULARITY


def many_adapter_verdicts(claims: list[dict[str, Any]], config: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims the "Many adapters" section answers: adapter scaling, and ratios with a side on one of its drawn
    conditions (SGLang's slot cliff in TTFT: 32 drawn adapters against 8 on 8 slots)."""
    names = {n for n, c in (config.get("conditions") or {}).items() if drawn(c)}

    def on_drawn(measure: dict[str, Any]) -> bool:
        return any((measure.get(side) or {}).get("condition") in names for side in ("num", "den"))

    return [c for c in claims if c["measure"]["kind"] == "adapter_scaling" or on_drawn(c["measure"])]


def many_adapter_rows(
    rows: list[dict[str, Any]], queues: dict[str, Any], conditions: dict[str, Any]
) -> list[dict[str, Any]]:
    """Summary rows of the conditions drawn from a popularity distribution (uniform, distinct, zipf), joined with
    the TTFT tail and adapter sets of queues.json, ordered by server, assignment (a Zipf law with its exponent)
    and adapter count."""
    cells = {(s["server"], c["condition"], c["burst"]): c for s in queues.get("servers", []) for c in s["cells"]}
    out = []
    for r in rows:
        cond = conditions.get(r["condition"]) or {}
        if not drawn(cond):
            continue
        c = cells.get((r["server"], r["condition"], r["burst"]), {})
        out.append(
            {
                **r,
                "assignment": cond["assignment"]
                + (f" s={cond['zipf_s']:g}" if cond["assignment"] == "zipf" and cond.get("zipf_s") else ""),
                "n_adapters": len({a for a in cond.get("adapters", []) if a != "base"}),
                **{k: v for k, v in c.items() if k.startswith("ttft") or k.endswith("_seen") or k.endswith("running")},
                "deferred_mean": c.get("deferred_mean"),
            }
        )
    return sorted(out, key=lambda r: (r["server"], r["assignment"], r["burst"], r["n_adapters"]))


def _span_text(lo: float | None, hi: float | None) -> str:
    if lo is None or hi is None:
        return ""
    return f" [{lo:+.1f}, {hi:+.1f}]"


def _ratio(num: dict[str, Any], den: dict[str, Any]) -> tuple[float, float, float]:
    """Ratio and span in percent (stats.ratio_span: measurements paired by time within one server job, else what
    the two medians' 95 % intervals allow)."""
    span = stats.ratio_span(num, den)
    assert span is not None
    return span


def _beyond(lo: float, hi: float) -> bool:
    """Does a ratio's span (percent) leave out 0, so that the difference is beyond our spread?"""
    return lo > 0 or hi < 0


def _stable(lo: float, hi: float) -> str:
    return "a difference beyond our spread" if _beyond(lo, hi) else "within our spread: no difference shown"


def _cell(rows: list[dict[str, Any]], burst: int, lora: bool, cond: str, most_slots: bool = False) -> Any:
    """The row of one burst, LoRA setting and condition (the server with the fewest slots, or the most)."""
    rs = [r for r in rows if r["burst"] == burst and bool(r.get("lora")) == lora and r["condition"] == cond]
    rs.sort(key=lambda r: r.get("max_loras") or 0, reverse=most_slots)
    return rs[0] if rs else None


def _finding(
    key: str, engine: str, question: str, what: str, pairs: list[tuple[int, Any, Any]]
) -> dict[str, Any] | None:
    """One finding about one engine over every burst: each burst's median ratio and span, then where it is beyond
    the spread."""
    parts, beyond = [], []
    pairs = [(b, n, d) for b, n, d in pairs if n and d]
    for burst, num, den in pairs:
        m, lo, hi = _ratio(num, den)
        parts.append(f"burst {burst}: {m:+.1f}%{_span_text(lo, hi)}")
        if _beyond(lo, hi):
            beyond.append(str(burst))
    if not pairs:
        return None
    if not beyond:
        verdict = "within our spread at every burst: no difference shown"
    elif len(beyond) == len(pairs):
        verdict = "a difference beyond our spread at every burst"
    else:
        verdict = f"a difference beyond our spread at burst {', '.join(beyond)}, within it elsewhere"
    groups = {n.get("group") if n.get("group") == d.get("group") else None for _, n, d in pairs}
    if len(groups) == 1 and (g := groups.pop()) and any(n.get("server") != d.get("server") for _, n, d in pairs):
        verdict += f"; paired per cycle: the two servers were co-resident, in group {g}"
    return {"key": key, "engine": engine, "question": question, "answer": f"{what}: {'; '.join(parts)} ({verdict})"}


def _union_engines(rows: list[dict[str, Any]]) -> list[str]:
    """The engines of ``rows`` (their kinds, as the rows name them, not the config's engine ids) whose LoRA layers
    cover the union of the served adapters' targets."""
    return sorted({r["engine"] for r in rows if get_engine(r["engine"]).lora_layers_union})


def _engine_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The engine comparison's rows, each with ``apart``: whether its two servers ran on different machines (their
    recorded boot ids differ), which the span does not cover."""
    boots = boot_ids(summary.get("facts"))
    return [{**c, "apart": other_machines(boots.get(c["a_server"]), boots.get(c["b_server"]))}
            for c in summary.get("engine_comparison") or []]  # fmt: skip


def _across(found: dict[str, Any] | None, boots: dict[str, str], a: str, b: str) -> dict[str, Any] | None:
    """A finding comparing two server jobs, with a note where they ran on different machines: each interval
    holds the spread within its job, not what differs between two machines, so the comparison is not decided by
    them."""
    if found and other_machines(boots.get(a), boots.get(b)):
        found["answer"] += (f"; {a} and {b} ran on different machines, which the intervals do not cover: not a "
                            "comparison on one machine")  # fmt: skip
    return found


def _cache_finding(
    engine: str, eng: list[dict[str, Any]], conditions: dict[str, Any], boots: dict[str, str]
) -> dict[str, Any] | None:
    """What a host cache smaller than the adapters in use costs (vLLM's max_cpu_loras): two LoRA servers alike in
    slots and rank, one with the smallest cache and one with the largest, compared on each condition both measured
    whose adapters outnumber the smaller cache (the cells' medians: two server jobs, never paired per cycle). Of
    several slot counts with caches that differ, the first in order that has such a condition."""
    caches: dict[tuple[Any, Any], dict[str, float]] = {}
    for r in eng:
        if r.get("lora") and r.get("max_cpu_loras"):
            caches.setdefault((r.get("max_loras"), r.get("max_lora_rank")), {})[r["server"]] = r["max_cpu_loras"]
    cells = {(r["server"], r["condition"], r["burst"]): r for r in eng}
    for (slots, _), by in sorted(caches.items(), key=lambda kv: str(kv[0])):
        if len(set(by.values())) < 2:
            continue
        small = min(by, key=lambda s: (by[s], s))
        large = max(by, key=lambda s: (by[s], s))
        parts, beyond = [], 0
        for (server, cond, burst), num in sorted(cells.items()):
            den = cells.get((large, cond, burst))
            if server != small or not den or len(adapter_set(conditions.get(cond) or {})) <= by[small]:
                continue
            m, lo, hi = _ratio(num, den)
            parts.append(f"{cond} at burst {burst}: {m:+.1f}%{_span_text(lo, hi)}")
            beyond += _beyond(lo, hi)
        if not parts:
            continue
        verdict = ("a difference beyond our spread in each" if beyond == len(parts)
                   else "within our spread in each: no difference shown" if not beyond
                   else f"a difference beyond our spread in {beyond} of {len(parts)}")  # fmt: skip
        what = (f"host cache of {by[small]:g} vs {by[large]:g} adapters on {slots} slots ({small} vs {large}: two "
                "server jobs, not paired per cycle, so the span is what the two medians' intervals allow)")  # fmt: skip
        found = {"key": "cache", "engine": engine, "question": f"{engine}: what does a host cache smaller than the "
                 "adapters in use cost?", "answer": f"{what}: {'; '.join(parts)} ({verdict})"}  # fmt: skip
        return _across(found, boots, small, large)
    return None


COUNT_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _count(n: int) -> str:
    return COUNT_WORDS[n] if 0 <= n < len(COUNT_WORDS) else str(n)


def _runtime_answer(rt: dict[str, Any]) -> str:
    n, ok = len(rt["cycles"]), rt.get("loads_ok", len(rt["cycles"]))
    if not ok:
        return f"{rt['server']}: no load call of {n} succeeded ({'; '.join(rt.get('load_errors') or [])})"
    out = (f"{rt['server']}: load call {rt['load_s_median']:.3f} s (median of {ok}); first request TTFT "
           f"{rt['cold_ttft_ms_median']:.0f} ms, then {rt['warm_ttft_ms_median']:.0f} ms warm vs "
           f"{rt['resident_ttft_ms_median']:.0f} ms for a resident adapter")  # fmt: skip
    if ok < n:
        out += f"; {n - ok} of {n} load calls refused ({'; '.join(rt.get('load_errors') or [])}): not a finding"
    if rt.get("reloads_on_request"):
        out += "; an unloaded adapter is loaded again by the next request naming it"
    return out


def _prefix_answer(pc: dict[str, Any]) -> str:
    if not pc.get("cached_tokens_reported"):
        return f"{pc['server']}: the engine does not report cached prompt tokens"
    if not pc.get("caches_prefixes"):
        return f"{pc['server']}: no prefix reused even for the same model (prefix caching off or evicted at once)"
    across = [p for p in pc["pairs"] if p["first"] != p["second"]]
    shared = [f"{p['first']} then {p['second']}" for p in across if p["reused"]]
    if not shared:
        return (f"{pc['server']}: yes; a prefix is reused for the same model and by no other "
                f"({', '.join(p['first'] + ' then ' + p['second'] for p in across)}: none of it cached)")  # fmt: skip
    return f"{pc['server']}: no; reused across models: {', '.join(shared)}"


SPREAD_KINDS = {
    "measurements": "whole measurements differ while the bursts inside each agree (a state lasting a measurement)",
    "bursts": "bursts vary inside measurements",
    "too few": "too few measurements for a narrower interval",
    "cycles": "bursts differ from one cycle to the next (method v2: one burst per cycle)",
}


def stability(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How many measured cells reached their interval target, and why the others did not, grouped by the kind
    of spread their own measurements show (summary's ``spread_kind``), each group with the range of its
    figures and the telemetry named most often."""
    measured = [r for r in rows if r.get("status") == "ok" and r.get("reached_target") is not None]
    if not measured:
        return None
    missed = [r for r in measured if r.get("reached_target") is False]
    groups = []
    for kind, text in SPREAD_KINDS.items():
        rs = [r for r in missed if r.get("spread_kind") == kind]
        if not rs:
            continue
        between = [r["between_sd_pct"] for r in rs if r.get("between_sd_pct") is not None]
        burst = [r["burst_sd_pct"] for r in rs if r.get("burst_sd_pct") is not None]
        moves = [r["spread_moves_with"] for r in rs if r.get("spread_moves_with")]
        top = max(sorted(set(moves)), key=moves.count) if moves else None  # ties: the first by name, every run
        bound = [r for r in rs if thread_bound(r)]
        names = sorted({str(r.get("engine_top_thread")) for r in bound if r.get("engine_top_thread")})
        groups.append({
            "kind": kind, "text": text, "n": len(rs), "rows": rs,
            "moves_with": top, "moves_n": moves.count(top) if top else 0,
            "bound_n": len(bound), "bound_threads": ", ".join(names),
            "between_text": _pct_range((min(between), max(between))) if between else "",
            "burst_text": _pct_range((min(burst), max(burst))) if burst else "",
        })  # fmt: skip
    targets = sorted({float(r["target_ci_pct"]) for r in measured if r.get("target_ci_pct") is not None})
    target = " or ".join(f"±{t:g} %" for t in targets) or "their target"
    widths = [r["throughput_ci_pct"] for r in measured if r.get("throughput_ci_pct") is not None]
    return {
        "n": len(measured),
        "reached": len(measured) - len(missed),
        "target": target,
        "groups": groups,
        "widest": max(widths) if widths else None,
        "median_width": statistics.median(widths) if widths else None,
    }


def _paired_answer(comparisons: list[Comparison]) -> str:
    """How many comparisons within a server met their target, and the widest, with how they were paired."""
    judged = [c for c in comparisons if c.within_target is not None]
    widths = [c for c in comparisons if not math.isnan(c.ratio.halfwidth_points)]
    by = sorted({c.paired_by for c in comparisons})
    text = f"{sum(bool(c.within_target) for c in judged)} of {len(comparisons)} within their target"
    if widths:
        w = max(widths, key=lambda c: c.ratio.halfwidth_points)
        text += (f"; widest ±{w.ratio.halfwidth_points:.1f} points ({w.server} {w.condition} vs {w.reference}, "
                 f"burst {w.burst}, {w.pairs} pairs)")  # fmt: skip
    outside = [c for c in judged if not c.within_target]
    paced = [c for c in outside if c.gpu_paced_r is not None]
    if paced:
        text += (f"; of the {len(outside)} outside, {len(paced)} host-paced (their slow bursts are those in which "
                 f"the GPU waited for the host)")  # fmt: skip
    for c in comparisons:
        if c.aa_reading is not None:
            text += (f"; A/A ({c.server} {c.condition} vs {c.reference}, the same mix again, burst {c.burst}): "
                     f"{c.ratio.pct:+.1f}%{_span_text(c.ratio.lo_pct, c.ratio.hi_pct)}, {c.aa_reading}")  # fmt: skip
    unpaired = sum(c.paired_by == "unpaired" for c in comparisons)
    by = [b for b in by if b != "unpaired"]
    if by:
        text += f"; paired by {' and '.join(by)}"
    if unpaired:
        text += (f"; {unpaired} unpaired (too few cycles pair: the span the two medians' intervals allow, not a "
                 "paired interval)")  # fmt: skip
    return text


def _group_answer(comparisons: list[ServerComparison]) -> str:
    """The comparisons between the servers of co-resident groups: how many, paired per cycle, the widest, and each
    A/A pair's reading (two servers of one setup: whether co-residence distorts on this machine)."""
    groups = sorted({c.group for c in comparisons if c.group})
    paired = [c for c in comparisons if c.paired_by != "unpaired"]
    text = (f"{len(paired)} of {len(comparisons)} comparisons between the servers of group {', '.join(groups)} "
            "paired per cycle (both servers up together, their bursts interleaved)")  # fmt: skip
    widths = [c for c in paired if not c.aa and not math.isnan(c.ratio.halfwidth_points)]
    if widths:
        w = max(widths, key=lambda c: c.ratio.halfwidth_points)
        text += (f"; widest ±{w.ratio.halfwidth_points:.1f} points ({w.server} vs {w.reference_server}, "
                 f"{w.condition}, burst {w.burst}, {w.pairs} pairs)")  # fmt: skip
    for g in groups:
        if not any(c.aa for c in comparisons if c.group == g):
            text += (f"; group {g} has no A/A pair (two servers of one setup), so nothing in it shows whether "
                     "co-resident servers measure alike on this machine: read its rows with that caveat")  # fmt: skip
    for c in comparisons:
        if c.aa_reading is None:
            continue
        head = (f"; A/A ({c.server} vs {c.reference_server}, the same setup, {c.condition} at burst {c.burst}): "
                f"{c.ratio.pct:+.1f}%{_span_text(c.ratio.lo_pct, c.ratio.hi_pct)}")  # fmt: skip
        if c.aa_reading == "holds":
            text += head + f", within ±{AA_POINTS:.0f} point of 0: co-residence distorts nothing measurable here"
        elif c.aa_reading == "too wide to confirm":
            text += head + (f", holding 0 but reaching beyond ±{AA_POINTS:.0f} point: too wide to confirm that "
                            "co-residence distorts nothing (more cycles narrow it)")  # fmt: skip
        else:
            text += head + (f", not within ±{AA_POINTS:.0f} point of 0: co-resident servers measure apart on this "
                            "machine, so its cross-server pairs are not read as the configurations' difference "
                            "(measure them one server at a time here)")  # fmt: skip
    return text


def _bound_answer(rows: list[dict[str, Any]]) -> str:
    """Which cells measured the engine's front end or the host rather than the engine on its device."""
    parts = []
    for key, what in (("throughput_bound", "throughput"), ("latency_bound", "latencies")):
        for kind in ("front-end-bound", "host-bound"):
            rs = [r for r in rows if r.get(key) == kind]
            if rs:
                servers = sorted({r["server"] for r in rs})
                parts.append(f"{what} of {len(rs)} of {len(rows)} cells {kind} ({', '.join(servers)})")
    if not parts:
        return "yes: no cell was front-end-bound or host-bound"
    return (
        "not everywhere: " + "; ".join(parts) + ". Front-end-bound: the engine's HTTP front end kept one CPU "
        "busy, so the figure is its speed; host-bound: the GPU waited for the host more than a quarter of the time"
    )


HOST_SPEED_NOTE_PCT = 1.0  # a difference of the host CPU probe between server jobs worth a sentence


def _host_speed_answer(facts: list[dict[str, Any]]) -> str:
    """How far the CPU probe's time moved between server jobs (their medians): a fixed piece of work on the
    client's CPU, slower where the host runs slower or the client's CPU is busier between measurements; the probe
    cannot tell the two apart."""
    probes = {f["server"]: f["host_cpu_probe_ms"] for f in facts if f.get("host_cpu_probe_ms")}
    if len(probes) < 2:
        return ""
    slow, fast = max(probes, key=probes.__getitem__), min(probes, key=probes.__getitem__)
    pct = 100 * (probes[slow] / probes[fast] - 1)
    if pct < HOST_SPEED_NOTE_PCT:
        return f"; the CPU probe took the same time in every server job (within {pct:.1f} %)"
    return (f"; the CPU probe took {pct:.1f} % longer during {slow}'s job than during {fast}'s: the host, or the "
            "load on the client's CPU, differed between the jobs, and ratios between servers measured at different "
            "times carry such a difference")  # fmt: skip


def _shared_device_answer(facts: list[dict[str, Any]]) -> str:
    """The server jobs that measured beside other runs' servers (``device_check``, LORABENCH_FOREIGN_SERVERS=ignore):
    their figures include whatever those servers took from the machine."""
    shared = [f["server"] for f in facts if isinstance(f.get("device_check"), str)]  # NaN from a table: not set
    if not shared:
        return ""
    return (f"; {', '.join(shared)} measured beside other runs' servers (LORABENCH_FOREIGN_SERVERS=ignore), which "
            "took their share of the machine: not figures of the engine alone")  # fmt: skip


def _pct_range(span: tuple[float, float]) -> str:
    lo, hi = (f"{v:.1f}" for v in span)
    return f"±{lo} %" if lo == hi else f"±{lo}-{hi} %"


def _stability_answer(st: dict[str, Any]) -> str:
    out = f"{st['reached']} of {st['n']} measured cells within {st['target']} (95 % interval of the median"
    if st.get("widest") is not None:
        out += f"; median ±{st['median_width']:.1f} %, widest ±{st['widest']:.1f} %"
    out += ")"
    for g in st["groups"]:
        part = f"{g['n']}: {g['text']}"
        if g["between_text"] and g["burst_text"] and g["kind"] == "measurements":
            part += f", {g['between_text']} between measurements against {g['burst_text']} from bursts"
        if g["moves_with"]:
            part += f"; in {g['moves_n']} of them throughput moves with {g['moves_with']}"
        if g.get("bound_n"):
            who = f" ({g['bound_threads']})" if g["bound_threads"] else ""
            part += (f"; in {g['bound_n']} of them the engine's busiest thread{who} kept one CPU full in every "
                     "measurement (an engine bound by one host thread)")  # fmt: skip
        out += f"; {part}"
    return out + ("" if st["groups"] else "; every cell reached it")


def _side_findings(
    jobs: list[dict[str, Any]], key: str, question: str, answer: Callable[[dict[str, Any]], str]
) -> list[dict[str, Any]]:
    """One finding per runtime-loading or prefix-caching job that ran. A claim on them is evaluated on the first
    job of its engine that ran (a claim naming no engine: on the first job), so only that job's finding carries it
    (``key``; the others of the same engine ``key-more``; ``engine_only``: not the first job)."""
    ran = [j for j in jobs if j.get("status") == "ok"]
    first = {j["engine"]: j for j in reversed(ran)}
    return [
        {"key": key if first[j["engine"]] is j else f"{key}-more", "engine": j["engine"],
         "engine_only": j is not ran[0], "question": f"{j['engine']}: {question}", "answer": answer(j)}
        for j in ran
    ]  # fmt: skip


def capacity_findings(capacity: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The sizing answer of the rate sweeps (capacity.capacity_model), one per adapter mix, naming the swept
    servers that did not run, so that a table of fewer servers does not read as the whole answer."""
    if not capacity or not capacity.get("mixes"):
        return []
    missing = sorted({line.split(":", 1)[0] for line in capacity.get("not_run") or []})
    tail = f" Not measured: {', '.join(missing)}." if missing else ""
    within = (capacity.get("slo") or {}).get("text", "the latency target")
    return [
        {"key": "capacity", "question": f"which configuration serves the most within {within}, mix {m['mix']}?",
         "answer": m["finding"] + tail}
        for m in capacity["mixes"]
    ]  # fmt: skip


def findings(
    rows: list[dict[str, Any]],
    runtime: list[dict[str, Any]],
    comparison: list[dict[str, Any]],
    prefix: list[dict[str, Any]] | None = None,
    facts: list[dict[str, Any]] | None = None,
    comparisons: list[dict[str, Any]] | None = None,
    config: dict[str, Any] | None = None,
    links: dict[str, list[str]] | None = None,
    claim_engines: dict[str, str | None] | None = None,
    capacity: dict[str, Any] | None = None,
    server_comparisons: list[dict[str, Any]] | None = None,
) -> list[dict]:
    """What the run answers, first: the cost of enabling LoRA, of one adapter, of too few slots, of a host cache smaller
    than the adapters in use, of runtime loading, and the engine comparison. Each answer names the rows it comes
    from and says whether the difference is beyond our span (stats.ratio_span: paired by time within one server
    job). The conditions compared are the ``config``'s of role base, one-adapter and over-slots
    (roles.role_conditions; without a config, none); each finding carries the claims ``links`` gives its key
    (claims.finding_links: the registry's ``finding``); a finding about one engine only those about that engine or
    none (``claim_engines``: claims.claim_engines), so that a claim judged on vLLM is never shown under SGLang's
    answer."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("throughput_median")]
    found: list[dict[str, Any] | None] = []
    st = stability(rows)
    if st:
        question = "how stable are these figures?"
        answer = _stability_answer(st) + _host_speed_answer(facts or []) + _shared_device_answer(facts or [])
        found.append({"key": "stability", "question": question, "answer": answer})
    if comparisons:
        found.append({"key": "paired", "question": "how tight are the comparisons within each server?",
                      "answer": _paired_answer([Comparison.from_json(c) for c in comparisons])})  # fmt: skip
    if server_comparisons:
        answer = _group_answer([ServerComparison.from_json(c) for c in server_comparisons])
        found.append({"key": "groups", "question": "how do co-resident servers compare, paired in time?",
                      "answer": answer})  # fmt: skip
    bound = [r for r in ok if r.get("throughput_bound") or r.get("latency_bound")]
    if bound:
        found.append({"key": "bound", "question": "do these figures measure the engine?", "answer": _bound_answer(ok)})
    picks = role_conditions(config) if config else {}
    base, one, over = picks.get("base"), picks.get("one-adapter"), picks.get("over-slots")
    boots = boot_ids(facts)
    for engine in sorted({r["engine"] for r in ok}):
        eng = [r for r in ok if r["engine"] == engine]
        bursts = sorted({r["burst"] for r in eng})
        if base:
            off = _cell(eng, bursts[0], False, base)
            # of the LoRA servers, one on the LoRA-off server's machine first (a study put together from runs)
            near = (
                [r for r in eng if not other_machines(boots.get(r["server"]), boots.get(off["server"]))] if off else []
            )
            on = _cell(near, bursts[0], True, base) or _cell(eng, bursts[0], True, base)
            if on and off:
                on_rows, off_rows = ([r for r in eng if r["server"] == c["server"]] for c in (on, off))
                pairs = [(b, _cell(on_rows, b, True, base), _cell(off_rows, b, False, base)) for b in bursts]
                what = f"base-model requests on {on['server']} vs {off['server']}"
                found.append(
                    _across(_finding("enable", engine, f"{engine}: what does merely enabling LoRA cost?", what, pairs),
                            boots, on["server"], off["server"])
                )  # fmt: skip
            # both cells from one server (paired per cycle): of the servers measuring both, the fewest slots
            first = [r for r in eng if r["burst"] == bursts[0] and r.get("lora")]
            both = {r["server"] for r in first if r["condition"] == one} & {
                r["server"] for r in first if r["condition"] == base
            }
            if one and both:
                slots = {r["server"]: r.get("max_loras") or 0 for r in first}
                server = min(both, key=lambda s: (slots[s], s))
                at = [r for r in eng if r["server"] == server]
                pairs = [(b, _cell(at, b, True, one), _cell(at, b, True, base)) for b in bursts]
                what = f"adapter {one} vs {base} on {server}"
                found.append(_finding("adapter", engine, f"{engine}: what does serving one adapter cost?", what, pairs))
        if over and config:
            few, many = _cell(eng, bursts[0], True, over), _cell(eng, bursts[0], True, over, most_slots=True)
            if few and many and few.get("max_loras") != many.get("max_loras"):
                pairs = [(b, _cell(eng, b, True, over), _cell(eng, b, True, over, most_slots=True)) for b in bursts]
                n = _count(len(adapter_set(config["conditions"][over])))
                what = f"{n} adapters ({over}) on {few['max_loras']} slots vs {many['max_loras']} slots"
                found.append(
                    _across(_finding("slots", engine, f"{engine}: what do too few adapter slots cost?", what, pairs),
                            boots, few["server"], many["server"])
                )  # fmt: skip
        if config:
            found.append(_cache_finding(engine, eng, config.get("conditions") or {}, boots))
    out: list[dict[str, Any]] = [f for f in found if f]
    out += _side_findings(runtime, "runtime", "how fast is loading an adapter at run time?", _runtime_answer)
    out += _side_findings(prefix or [], "prefix", "is the prefix cache kept separate per adapter?", _prefix_answer)
    out += capacity_findings(capacity)
    if comparison:
        diffs = [c for c in comparison if _beyond(c["ratio_lo_pct"], c["ratio_hi_pct"])]
        c0 = comparison[0]
        med = statistics.median(c["ratio_pct"] for c in comparison)
        a = (f"{len(diffs)} of {len(comparison)} rows (servers of one setting on each engine, not paired) differ "
             f"beyond the spread; median ratio {med:+.1f}%")  # fmt: skip
        apart = [c for c in comparison if other_machines(boots.get(c["a_server"]), boots.get(c["b_server"]))]
        if apart:
            a += (f"; {len(apart)} of {len(comparison)} compare servers that ran on different machines, which no "
                  "interval here covers")  # fmt: skip
        out.append({"key": "engines", "question": f"{c0['b_engine']} against {c0['a_engine']}", "answer": a})
    engine_of = claim_engines or {}
    for f in out:
        ids = (links or {}).get(f["key"], ())
        f["claims"] = [
            c
            for c in ids
            if f.get("engine") is None
            or engine_of.get(c) == f["engine"]
            or (engine_of.get(c) is None and not f.get("engine_only"))
        ]
    return out
