"""Rule engine_env: build (or check) the engine's isolated environment and record its exact contents."""

import json

from lorabench.envs import prepare_env
from lorabench.io import setup_job_logging

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
prepare_env(json.loads(sm.params.spec), sm.output.info, sm.output.freeze)
