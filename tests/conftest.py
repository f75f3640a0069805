"""Shared fixtures. Slow tests start real vLLM (CPU build) servers; they are marked and still run in CI."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
FIXTURES = ROOT / "tests" / "fixtures"


# The default study's measurement, lighter for the tests (they check behaviour, not figures; `make study` runs it
# as configured): one server start instead of two, 6 to 8 repetitions instead of 10 to 14.
LIGHTER = {"server_starts": 1, "repetitions": 6, "max_repetitions": 8}


@pytest.fixture(scope="session")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default study, run once per test session in a copy of the repository with ``LIGHTER`` measurement
    settings written into the copy's config (real vLLM servers; it also builds the engine environment that other
    slow tests use)."""
    from .test_pipeline_e2e import copy_repo, snakemake

    work = copy_repo(tmp_path_factory.mktemp("study"))
    cfg = work / "config" / "config.yaml"
    text = cfg.read_text()
    for key, value in LIGHTER.items():
        text, n = re.subn(rf"^{key}: *\d+", f"{key}: {value}", text, count=1, flags=re.M)
        assert n == 1, f"config/config.yaml has no top-level {key}"
    cfg.write_text(text)
    snakemake(work)
    return work
