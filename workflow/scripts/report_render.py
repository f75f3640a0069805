"""Rule report_render: the HTML report with tables, plots, verdicts and provenance."""

import json
from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.report import render_report
from lorabench.report_model import ReportInputs

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
inputs = ReportInputs.read(
    study=sm.params.study,
    config=json.loads(sm.params.config),
    summary_path=sm.input.summary,
    verdicts_path=sm.input.verdicts,
    model_path=sm.input.model,
    adapter_paths=list(sm.input.adapters),
    env_paths=list(sm.input.envs),
    queues_path=sm.input.queues,
    capacity_path=sm.input.capacity[0] if sm.input.capacity else None,
)
render_report(
    inputs,
    out_html=Path(sm.output.html),
    out_provenance=Path(sm.output.provenance),
    hardware_path=sm.input.hardware,
    templates=Path(sm.params.checkout) / "report" / "templates",  # the rule's templates input
    checkout=Path(sm.params.checkout),
)
