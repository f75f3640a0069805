"""Rule capacity_summary: capacity at the SLO per mix across the swept servers, the sizing findings and the plots
(see lorabench.capacity)."""

import json
from pathlib import Path

from lorabench.capacity import ServerInfo, capacity_model
from lorabench.io import setup_job_logging, write_json

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
servers = ServerInfo.of_config({"servers": json.loads(sm.params.servers)})
model = capacity_model(list(sm.input.sweeps), servers, json.loads(sm.params.conditions), Path(sm.output.plots))
write_json(sm.output.capacity, model)
