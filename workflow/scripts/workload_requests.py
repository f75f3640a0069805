"""Rule workload_requests: the request set, generated once with its seed."""

import json

from lorabench.io import setup_job_logging, write_json
from lorabench.loadgen.prompts import HfTokenizer
from lorabench.loadgen.workload import build_request_set

log = setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
counter = HfTokenizer(sm.input.model) if sm.input.model else None
rset = build_request_set(
    json.loads(sm.params.workload),
    json.loads(sm.params.conditions),
    list(sm.params.bursts),
    workloads=json.loads(sm.params.workloads),
    counter=counter,
    limits={c: (int(n), str(where)) for c, (n, where) in json.loads(sm.params.limits).items()},
)
write_json(sm.output.requests, rset)
log.info(
    "request set: %d bursts' worth of requests, %d distinct prompts, seed %d",
    len(rset["sets"]),
    len(rset["prompts"]),
    rset["seed"],
)
for name, w in rset["workloads"].items():
    log.info(
        "workload %s (%s): prompt tokens %s (asked %s), output tokens %s",
        name,
        ", ".join(w["conditions"]) or "no condition",
        w["prompt_tokens"],
        w["prompt_tokens_intended"],
        w["output_tokens"],
    )
