"""Rule rate_sweep: one server's capacity at a latency target, per adapter mix (see lorabench.rate_sweep)."""

from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.job import ServerJob
from lorabench.jobs import JobFiles, run_job
from lorabench.rate_sweep import RateSweep

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
kind = RateSweep.from_json(sm.params.kind)
run_job(kind, ServerJob.from_json(sm.params.job), JobFiles.of(sm.input), Path(sm.output.sweep).parent)
