"""Rule prefix_cache: is a prefix cached under one model (base or adapter) reused by another?"""

from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.job import ServerJob
from lorabench.jobs import JobFiles, run_job
from lorabench.prefix_cache import PrefixCaching

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
kind = PrefixCaching.from_json(sm.params.kind)
run_job(kind, ServerJob.from_json(sm.params.job), JobFiles.of(sm.input), Path(sm.output.prefix).parent)
