"""Rule group_loadtest: a co-resident group of servers, started, measured in shared cycles and stopped by one job
(see lorabench.group)."""

import json
from pathlib import Path
from types import SimpleNamespace

from lorabench.group import GroupJob, run_group
from lorabench.io import setup_job_logging
from lorabench.jobs import JobFiles

setup_job_logging(snakemake.log[0])  # noqa: F821
sm = snakemake  # noqa: F821
files = {sid: JobFiles.of(SimpleNamespace(**f)) for sid, f in json.loads(sm.params.files).items()}
run_group(GroupJob.from_json(sm.params.group), dict(files), Path(sm.output.group).parent)
