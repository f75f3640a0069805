"""Rule runtime_load: load an adapter into a running server, time it, compare cold and resident requests."""

import json
from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.loadtest import job_from_rule
from lorabench.runtime_load import run_runtime_load, write_runtime_not_run

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
params = json.loads(sm.params.job)
out_dir = Path(sm.output.load).parent
if not params["runnable"]:
    write_runtime_not_run(params, out_dir, reason="not run: needs a GPU")
else:
    run_runtime_load(job_from_rule(params, sm.input, out_dir), params["runtime_load"])
