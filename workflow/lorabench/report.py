"""The HTML report: study tables, plots, claims with verdicts and provenance, rendered with Jinja2.

Reads only saved results (summary JSON, verdicts, manifests), so it rebuilds without a server or a GPU.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import jinja2

from . import plots, provenance
from .io import read_json, write_json, write_text_atomic

log = logging.getLogger(__name__)
TEMPLATES = Path(__file__).resolve().parents[2] / "report" / "templates"
# Peak memory bandwidth (bytes/s) by GPU name fragment, from vendor data sheets; used for the roofline bound.
GPU_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "L40S": 0.864e12, "A10": 0.6e12}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def fmt_num(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


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
) -> None:
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
    prov = provenance.collect(config, model, adapters, envs, summary.get("server_facts_raw", {}))
    write_json(out_provenance, prov)
    engines_in_study = sorted({r["engine"] for r in rows})
    slot_rows = [r for r in rows if r.get("lora") and r.get("max_loras")]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
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
        measurement=next(
            (f["measurement"] for f in summary.get("server_facts_raw", {}).values() if f.get("measurement")), {}
        ),
        conditions=summary.get("conditions", {}),
        sections=sorted({c["section"] for c in verdicts["claims"]}),
    )
    write_text_atomic(out_html, html)
    log.info("report: %s (%d rows, %d claims)", out_html, len(rows), len(verdicts["claims"]))
