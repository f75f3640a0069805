"""Rule model_build: synthetic weights of a named architecture, or a link to real weights."""

import json
from pathlib import Path

from lorabench.io import setup_job_logging
from lorabench.model import prepare_model

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
prepare_model(json.loads(sm.params.spec), Path(sm.output.weights), Path(sm.output.manifest))
