"""The HTML report: renders a study's report model (report_model.py) with the Jinja2 templates of report/templates/,
one include per section, and writes the provenance beside it. Reads only saved results, so it rebuilds without a
server or a GPU; what the report says is decided in report_model, not here.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jinja2

from . import stats
from .io import write_json, write_text_atomic
from .report_model import ReportInputs, ReportModel, build

log = logging.getLogger(__name__)


def fmt_num(v: Any, digits: int = 1) -> str:
    return stats.fmt_num(v, digits)


def fmt_spread(r: dict[str, Any]) -> str:
    if r.get("status") != "ok" or r.get("throughput_median") is None:
        return r.get("status") or "-"
    return (
        f"{r['throughput_median']:,.1f} [{r['throughput_min']:,.1f}-{r['throughput_max']:,.1f}] n={r['throughput_n']}"
    )


def environment(templates: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
    )
    env.filters["num"] = fmt_num
    env.filters["spread"] = fmt_spread
    return env


def render(model: ReportModel, templates: Path) -> str:
    return environment(templates).get_template("report.html.j2").render(**model.context())


def render_report(
    inputs: ReportInputs,
    out_html: Path,
    out_provenance: Path,
    templates: Path,
    checkout: Path,
    hardware_path: str | Path | None = None,
) -> None:
    """Render the report of a study's saved results (``inputs``: ReportInputs.read) into ``out_html`` (plots beside
    it) with the ``templates`` folder; the provenance (``out_provenance``) records the commit of the lorabench
    ``checkout`` that renders it."""
    model = build(inputs, out_html.parent, checkout, hardware_path)
    write_json(out_provenance, model.provenance)
    write_text_atomic(out_html, render(model, templates))
    log.info("report: %s (%d rows, %d claims)", out_html, len(model.cost["rows"]), len(inputs.verdicts["claims"]))
