"""Rule adapter_build: one PEFT LoRA adapter and its manifest."""

import json
import shutil
from pathlib import Path

from lorabench.adapters import build_adapter
from lorabench.io import read_json, setup_job_logging

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
model = read_json(sm.input.manifest)
out = Path(sm.output.weights)
build_adapter(Path(model["path"]), sm.wildcards.adapter, json.loads(sm.params.spec), out, int(model["parameters"]))
shutil.copyfile(out / "manifest.json", sm.output.manifest)
