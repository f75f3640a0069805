"""Rule queues_summary: batch size and queues per server, condition and burst, from the sampled engine metrics."""

import json

from lorabench.io import setup_job_logging
from lorabench.queues import aggregate, cliff_sentence

log = setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
result = aggregate(
    list(sm.input.metrics),
    list(sm.input.facts),
    json.loads(sm.params.conditions),
    sm.output.queues,
    list(sm.input.records),
)
for c in result["cliffs"]:
    log.info("%s", cliff_sentence(c))
