"""Rule runtime_load: load an adapter into a running server, time it, compare cold and resident requests."""

from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.job import ServerJob
from lorabench.jobs import JobFiles, run_job
from lorabench.runtime_load import RuntimeLoading

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
kind = RuntimeLoading.from_json(sm.params.kind)
run_job(kind, ServerJob.from_json(sm.params.job), JobFiles.of(sm.input), Path(sm.output.load).parent)
