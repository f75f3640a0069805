"""Rule workload_requests: the request set, generated once with its seed."""

import json

from lorabench.io import setup_job_logging, write_json
from lorabench.loadgen.workload import build_request_set

log = setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
rset = build_request_set(json.loads(sm.params.workload), json.loads(sm.params.conditions), list(sm.params.bursts))
write_json(sm.output.requests, rset)
log.info("request set: %d bursts' worth of requests, seed %d", len(rset["sets"]), rset["seed"])
