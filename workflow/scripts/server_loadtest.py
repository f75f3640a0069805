"""Rule server_loadtest: one server configuration's whole life (see lorabench.loadtest)."""

from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.loadtest import run_loadtest, run_rule_job

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
run_rule_job(sm.params.job, sm.input, Path(sm.output.facts).parent, run_loadtest)
