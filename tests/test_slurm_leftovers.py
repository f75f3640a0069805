"""Which SLURM jobs count as an earlier run's leftovers of a study (lorabench.slurm), without a cluster: the
cancelling itself, on a real one, is in tests/test_slurm.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorabench.slurm import Job, cancel_leftovers, is_leftover

RUN = "3f2a9c1e-8b7d-4e6f-a5c4-1b2d3e4f5a6b"
RULES = {"server_loadtest", "engine_env", "model_build"}


def test_only_this_folders_snakemake_jobs_of_its_rules(tmp_path: Path):
    (tmp_path / "link").symlink_to(tmp_path)

    def job(name: str = RUN, comment: str = "rule_server_loadtest_wildcards_lora-2", workdir: Path = tmp_path) -> Job:
        return Job("17", "RUNNING", name, comment, str(workdir))

    assert is_leftover(job(), tmp_path, RULES)
    assert is_leftover(job(comment="rule_model_build"), tmp_path, RULES)
    assert is_leftover(job(name=f"nightly_{RUN}"), tmp_path, RULES)  # --slurm-jobname-prefix
    assert is_leftover(job(workdir=tmp_path / "link"), tmp_path, RULES)  # the same folder by another path
    assert not is_leftover(job(workdir=tmp_path / "other"), tmp_path, RULES)  # another study
    assert not is_leftover(job(name="notebook"), tmp_path, RULES)  # not submitted by Snakemake
    assert not is_leftover(job(comment="rule_server_loadtest2"), tmp_path, RULES)  # not this workflow's rule
    assert not is_leftover(job(comment="(null)"), tmp_path, RULES)


def test_snakemake_inside_a_slurm_job_keeps_that_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    assert not is_leftover(Job("17", "RUNNING", RUN, "rule_engine_env", str(tmp_path)), tmp_path, RULES)


def test_nothing_to_do_without_squeue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    logged: list[str] = []
    assert cancel_leftovers(tmp_path, RULES, log=logged.append) == [] and logged == []
