"""Rule runtime_load: load an adapter into a running server, time it, compare cold and resident requests."""

from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.loadtest import run_rule_job
from lorabench.runtime_load import run_runtime_load

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
run_rule_job(sm.params.job, sm.input, Path(sm.output.load).parent, run_runtime_load)
