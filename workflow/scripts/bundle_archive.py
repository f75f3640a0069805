"""Rule bundle_archive: one archive per study run with a sha256 manifest of every file."""

from pathlib import Path

from lorabench.bundle import make_bundle
from lorabench.io import setup_job_logging

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
files = [f for key, v in sm.input.items() if key != "code" for f in ([v] if isinstance(v, str) else v)]
report_dir = Path(sm.input.report).parent
files += [str(p) for p in sorted(report_dir.iterdir()) if p.is_file()]
make_bundle(sorted(set(files)), Path(sm.output.bundle), study=sm.params.study)
