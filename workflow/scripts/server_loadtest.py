"""Rule server_loadtest: one server configuration's whole life (see lorabench.loadtest)."""

import json
from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.loadtest import job_from_rule, run_loadtest, write_not_run

log = setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
params = json.loads(sm.params.job)
out_dir = Path(sm.output.facts).parent
if not params["runnable"]:
    write_not_run(params, out_dir, reason="not run: needs a GPU")
else:
    run_loadtest(job_from_rule(params, sm.input, out_dir))
