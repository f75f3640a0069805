"""Rule summary_aggregate: tidy tables (CSV) and one summary JSON from every server's measurements."""

import json

from lorabench.io import setup_job_logging
from lorabench.summary import aggregate

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
aggregate(
    measurement_files=list(sm.input.measurements),
    fact_files=list(sm.input.facts),
    runtime_files=list(sm.input.runtime),
    prefix_files=list(sm.input.prefix),
    env_files=list(sm.input.envs),
    baseline=json.loads(sm.params.baseline),
    conditions=json.loads(sm.params.conditions),
    out=dict(sm.output),
)
