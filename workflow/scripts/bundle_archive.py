"""Rule bundle_archive: one archive per study run with a sha256 manifest of every file, including the config files
the run loaded (under results/bundle/config/loaded/, wherever they lay) and the merged config it ran with."""

import json
import shutil
from pathlib import Path

import yaml

from lorabench.bundle import make_bundle
from lorabench.io import setup_job_logging

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
skip = {"code", "config"}
files = [f for key, v in sm.input.items() if key not in skip for f in ([v] if isinstance(v, str) else v)]
cfg_dir = Path(sm.output.bundle).parent / "config"
shutil.rmtree(cfg_dir, ignore_errors=True)
(cfg_dir / "loaded").mkdir(parents=True)
for i, f in enumerate(sm.input.config):
    dst = cfg_dir / "loaded" / f"{i}-{Path(f).name}"
    shutil.copy2(f, dst)
    files.append(str(dst))
merged = cfg_dir / "merged.yaml"
merged.write_text(yaml.safe_dump(json.loads(sm.params.merged), sort_keys=True))
files.append(str(merged))
report_dir = Path(sm.input.report).parent
files += [str(p) for p in sorted(report_dir.iterdir()) if p.is_file()]
make_bundle(sorted(set(files)), Path(sm.output.bundle), study=sm.params.study)
