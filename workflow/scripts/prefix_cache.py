"""Rule prefix_cache: is a prefix cached under one model (base or adapter) reused by another?"""

from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.loadtest import run_rule_job
from lorabench.prefix_cache import run_prefix_cache

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
run_rule_job(sm.params.job, sm.input, Path(sm.output.prefix).parent, run_prefix_cache)
