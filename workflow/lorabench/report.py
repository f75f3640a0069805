"""The HTML report: study tables, plots, claims with verdicts and provenance, rendered with Jinja2.

Reads only saved results (summary JSON, verdicts, manifests), so it rebuilds without a server or a GPU.
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any

import jinja2

from . import plots, provenance, stats
from .io import read_json, write_json, write_text_atomic

log = logging.getLogger(__name__)
# Peak memory bandwidth (bytes/s) by GPU name fragment, from vendor data sheets; used for the roofline bound.
GPU_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "L40S": 0.864e12, "A10": 0.6e12}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def fmt_num(v: Any, digits: int = 1) -> str:
    return stats.fmt_num(v, digits)


def fmt_spread(r: dict[str, Any]) -> str:
    if r.get("status") != "ok" or r.get("throughput_median") is None:
        return r.get("status") or "-"
    return (
        f"{r['throughput_median']:,.1f} [{r['throughput_min']:,.1f}-{r['throughput_max']:,.1f}] n={r['throughput_n']}"
    )


def roofline(rows: list[dict[str, Any]], facts: list[dict[str, Any]], model: dict[str, Any]) -> None:
    """Add the memory-bandwidth bound on decode tokens/s (batch = burst, weights read once per step)."""
    dev = {f["server"]: (f.get("device") or "") for f in facts}
    weight_bytes = (model.get("parameters") or 0) * DTYPE_BYTES.get(model.get("dtype") or "bfloat16", 2)
    for r in rows:
        bw = next((b for k, b in GPU_BANDWIDTH.items() if k in dev.get(r["server"], "")), None)
        if bw and weight_bytes and r.get("burst"):
            r["roofline_tok_s"] = r["burst"] * bw / weight_bytes
            if r.get("throughput_median"):
                r["roofline_share_pct"] = 100 * r["throughput_median"] / r["roofline_tok_s"]


def render_report(
    study: str,
    config: dict[str, Any],
    summary_path: str,
    verdicts_path: str,
    model_path: str,
    adapter_paths: list[str],
    env_paths: list[str],
    out_html: Path,
    out_provenance: Path,
    templates: Path,
    checkout: Path,
) -> None:
    """Render the report from a study's summary, verdicts and manifests with the Jinja2 ``templates`` folder;
    the provenance records the commit of the lorabench ``checkout`` that renders it."""
    summary = read_json(summary_path)
    verdicts = read_json(verdicts_path)
    model = read_json(model_path)
    adapters = [read_json(p) for p in adapter_paths]
    envs = [read_json(p) for p in env_paths]
    out_dir = out_html.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):
        old.unlink()
    rows = summary["rows"]
    roofline(rows, summary["facts"], model)
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
    slot_fig = plots.slot_cliff(rows, out_dir / "slot_cliff.png")
    ttft_fig = plots.latency_spread(
        summary.get("measurements", []), out_dir / "ttft.png", "ttft_median_ms", "TTFT median (ms)"
    )
    itl_fig = plots.latency_spread(
        summary.get("measurements", []), out_dir / "itl.png", "itl_median_ms", "ITL median (ms)"
    )
    prov = provenance.collect(config, model, adapters, envs, summary.get("server_facts_raw", {}), checkout)
    write_json(out_provenance, prov)
    engines_in_study = sorted({r["engine"] for r in rows})
    slot_rows = [r for r in rows if r.get("lora") and r.get("max_loras")]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )
    env.filters["num"] = fmt_num
    env.filters["spread"] = fmt_spread
    html = env.get_template("report.html.j2").render(
        study=study,
        summary=summary,
        rows=rows,
        facts=summary["facts"],
        runtime=summary.get("runtime", []),
        verdicts=verdicts,
        model=model,
        adapters=adapters,
        envs=envs,
        figures=figures,
        slot_fig=slot_fig.name if slot_fig else None,
        ttft_fig=ttft_fig.name if ttft_fig else None,
        itl_fig=itl_fig.name if itl_fig else None,
        prov=prov,
        engines_in_study=engines_in_study,
        slot_rows=slot_rows,
        findings=findings(rows, summary.get("runtime", []), summary.get("engine_comparison") or []),
        measurement=next(
            (f["measurement"] for f in summary.get("server_facts_raw", {}).values() if f.get("measurement")), {}
        ),
        conditions=summary.get("conditions", {}),
        sections=sorted({c["section"] for c in verdicts["claims"]}),
    )
    write_text_atomic(out_html, html)
    log.info("report: %s (%d rows, %d claims)", out_html, len(rows), len(verdicts["claims"]))


def _span_text(lo: float | None, hi: float | None) -> str:
    if lo is None or hi is None:
        return ""
    return f" [{lo:+.1f}, {hi:+.1f}]"


def _ratio(num: dict[str, Any], den: dict[str, Any]) -> tuple[float, float, float]:
    """Median ratio and the span the repetitions allow (min/max .. max/min), in percent."""
    return (
        100 * (num["throughput_median"] / den["throughput_median"] - 1),
        100 * (num["throughput_min"] / den["throughput_max"] - 1),
        100 * (num["throughput_max"] / den["throughput_min"] - 1),
    )


def _stable(lo: float, hi: float) -> str:
    return "a difference beyond our spread" if lo > 0 or hi < 0 else "within our spread: no difference shown"


# The source's questions, each answered from this run's rows, with the claims that carry the verdicts.
FINDING_CLAIMS = {
    "enable": ("s6-lora-enabled-free", "s7-lora-enabled-free"),
    "adapter": ("s6-adapter-cost-range", "s7-adapter-cost-b48"),
    "slots": ("s6-slot-shortage-half", "s7-slot-shortage-56pct", "s41-sgl-slot-cliff"),
    "runtime": ("s5-runtime-load-time", "s5-after-load-same-speed", "s7-adapter-deploy-seconds"),
}


def findings(rows: list[dict[str, Any]], runtime: list[dict[str, Any]], comparison: list[dict[str, Any]]) -> list[dict]:
    """What the run answers, first: the cost of enabling LoRA, of one adapter, of too few slots, of runtime
    loading, and the engine comparison. Each answer names the rows it comes from and says whether the difference
    is beyond the span our repetitions allow."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("throughput_median")]
    burst = max((r["burst"] for r in ok), default=None)
    out: list[dict[str, Any]] = []
    for engine in sorted({r["engine"] for r in ok}):
        eng = [r for r in ok if r["engine"] == engine and r["burst"] == burst]
        off = next((r for r in eng if not r.get("lora") and r["condition"] == "base"), None)
        lora = sorted((r for r in eng if r.get("lora")), key=lambda r: r.get("max_loras") or 0)
        on_base = next((r for r in lora if r["condition"] == "base"), None)
        if off and on_base:
            m, lo, hi = _ratio(on_base, off)
            q = f"{engine}: what does merely enabling LoRA cost?"
            out.append({"key": "enable", "question": q,
                        "answer": f"base-model requests on {on_base['server']} vs {off['server']}, burst {burst}: "
                                  f"{m:+.1f}%{_span_text(lo, hi)}; {_stable(lo, hi)}"})  # fmt: skip
        one = next((r for r in lora if r["condition"] == "a"), None)
        if on_base and one:
            m, lo, hi = _ratio(one, on_base)
            q = f"{engine}: what does serving one adapter cost?"
            a = f"adapter a vs base on {one['server']}, burst {burst}: {m:+.1f}%{_span_text(lo, hi)}; {_stable(lo, hi)}"
            out.append({"key": "adapter", "question": q, "answer": a})
        slots = [r for r in lora if r["condition"] == "abc"]
        if len(slots) >= 2 and slots[0].get("max_loras") != slots[-1].get("max_loras"):
            m, lo, hi = _ratio(slots[0], slots[-1])
            a = (
                f"three adapters (abc) on {slots[0]['max_loras']} slots vs {slots[-1]['max_loras']} slots, "
                f"burst {burst}: {m:+.1f}%{_span_text(lo, hi)}; {_stable(lo, hi)}"
            )
            out.append({"key": "slots", "question": f"{engine}: what do too few adapter slots cost?", "answer": a})
    for rt in runtime:
        if rt.get("status") == "ok":
            q = f"{rt['engine']}: how fast is loading an adapter at run time?"
            out.append({"key": "runtime", "question": q,
                        "answer": f"{rt['server']}: load call {rt['load_s_median']:.3f} s (median of "
                                  f"{len(rt['cycles'])}); first request TTFT {rt['cold_ttft_ms_median']:.0f} ms, "
                                  f"then {rt['warm_ttft_ms_median']:.0f} ms warm vs {rt['resident_ttft_ms_median']:.0f}"
                                  " ms for a resident adapter"})  # fmt: skip
    if comparison:
        diffs = [c for c in comparison if c["ratio_lo_pct"] > 0 or c["ratio_hi_pct"] < 0]
        c0 = comparison[0]
        med = statistics.median(c["ratio_pct"] for c in comparison)
        a = f"{len(diffs)} of {len(comparison)} paired rows differ beyond the spread; median ratio {med:+.1f}%"
        out.append({"key": "engines", "question": f"{c0['b_engine']} against {c0['a_engine']}", "answer": a})
    for f in out:
        f["claims"] = list(FINDING_CLAIMS.get(f["key"], ()))
    return out
