"""Shared fixtures. Slow tests start real vLLM (CPU build) servers; they are marked and still run in CI."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="session")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default study, run once per test session in a copy of the repository (real vLLM servers; it also
    builds the engine environment that other slow tests use)."""
    from .test_pipeline_e2e import copy_repo, snakemake

    work = copy_repo(tmp_path_factory.mktemp("study"))
    snakemake(work)
    return work
