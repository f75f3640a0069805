"""Rule server_loadtest: one server configuration's whole life (see lorabench.loadtest)."""

from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.job import ServerJob
from lorabench.jobs import JobFiles, run_job
from lorabench.loadtest import LoadTest

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
run_job(LoadTest(), ServerJob.from_json(sm.params.job), JobFiles.of(sm.input), Path(sm.output.facts).parent)
