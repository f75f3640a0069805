"""Rule adapter_import: one adapter given by path, checked against the built model, copied, with its manifest."""

import json
import shutil
from pathlib import Path

from lorabench.io import read_json, setup_job_logging
from lorabench.own_adapters import ModelLayers, import_adapter, max_ranks_of

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
model = read_json(sm.input.manifest)
spec = json.loads(sm.params.spec)
dtype = model.get("dtype")
layers = ModelLayers.from_model_dir(Path(model["path"]), model["name"], None if dtype == "auto" else dtype)
out = Path(sm.output.weights)
import_adapter(
    sm.wildcards.adapter,
    spec["key"],
    Path(spec["path"]),
    out,
    layers,
    int(model["parameters"]),
    # read from the config, not params: a server added or changed reruns its own job, not this import
    max_ranks_of(sm.config, sm.wildcards.adapter),
)
shutil.copyfile(out / "manifest.json", sm.output.manifest)
