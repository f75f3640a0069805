"""Leftover SLURM jobs of an earlier run of this study, cancelled before a new run starts its servers.

A Snakemake run that is killed hard (SIGKILL, a lost login session) cannot cancel the jobs it submitted: they
keep running, and a leftover server job would hold a GPU (and its device lock) next to the new run's servers.
So when a run starts with the SLURM executor, the Snakefile's onstart handler calls :func:`cancel_leftovers`.

A job is this study's leftover when all of these hold (everything else, other users' jobs, other folders' jobs,
jobs not submitted by Snakemake, is never touched):

- it belongs to the user running Snakemake and is still queued or running (``squeue``'s default states);
- its working directory is this study's folder (snakemake-executor-plugin-slurm submits with ``-D`` set to the
  workflow's working directory);
- its name is a Snakemake run ID (the plugin names every job of a run by one UUID, optionally after a
  ``--slurm-jobname-prefix``);
- its comment names one of this workflow's rules or groups (the plugin sets ``rule_{rule}`` or
  ``rule_{rule}_wildcards_{values}``).

Snakemake's lock on the study's outputs keeps a second live run (one not started with ``--nolock``) from getting
this far, and the hook runs before this run submits anything, so the jobs found here are an earlier run's.
Cancelled jobs are logged one per line and waited for until SLURM no longer lists them as active, so that their
servers are gone before this run submits new ones. Without ``squeue`` on the PATH this does nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

SEP = "\x1f"  # a field separator that job names, comments and paths do not contain
FORMAT = SEP.join(("%i", "%T", "%j", "%k", "%Z"))
RUN_ID = re.compile(r"(?:[A-Za-z0-9_-]{1,50}_)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class SlurmError(RuntimeError):
    """squeue or scancel failed, or cancelled jobs stayed active; the message says which and why."""


@dataclass(frozen=True)
class Job:
    job_id: str
    state: str
    name: str
    comment: str
    workdir: str

    def describe(self) -> str:
        return f"{self.job_id} ({self.comment}, {self.state}, run {self.name})"


def _run(cmd: list[str], timeout: float = 60) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        raise SlurmError(f"`{' '.join(cmd)}` failed: {e}") from None
    if proc.returncode != 0:
        raise SlurmError(f"`{' '.join(cmd)}` exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def active_jobs(user: str | None = None) -> list[Job]:
    """The user's queued and running jobs (default: the user running this), as squeue lists them."""
    out = _run(["squeue", "--noheader", f"--user={user or os.getuid()}", f"--format={FORMAT}"])
    jobs = []
    for line in out.splitlines():
        fields = line.split(SEP)
        if len(fields) == 5:
            jobs.append(Job(*(f.strip() for f in fields)))
    return jobs


def _same_dir(a: str, b: str | Path) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def is_leftover(job: Job, workdir: str | Path, rules: Iterable[str]) -> bool:
    """Whether ``job`` is one this workflow's executor submitted from ``workdir`` (see the module's rules)."""
    if not RUN_ID.fullmatch(job.name) or not _same_dir(job.workdir, workdir):
        return False
    own = os.environ.get("SLURM_JOB_ID")  # Snakemake itself may run inside a SLURM job: never cancel that one
    if own and job.job_id == own:
        return False
    return any(job.comment == f"rule_{r}" or job.comment.startswith(f"rule_{r}_wildcards_") for r in rules)


def cancel_leftovers(
    workdir: str | Path,
    rules: Iterable[str],
    log: Callable[[str], None] = print,
    wait_s: float = 180,
    poll_s: float = 1,
) -> list[Job]:
    """Cancel this study's leftover jobs (see the module's docstring), log each one, and wait up to ``wait_s``
    seconds until squeue no longer lists any of them. Returns the cancelled jobs; [] without squeue."""
    if not shutil.which("squeue"):
        return []
    rules = list(rules)
    leftovers = [j for j in active_jobs() if is_leftover(j, workdir, rules)]
    if not leftovers:
        log(f"SLURM: no leftover jobs of an earlier run in {workdir}")
        return []
    _run(["scancel", *(j.job_id for j in leftovers)])
    for j in leftovers:
        log(f"SLURM: cancelled leftover job {j.describe()} of an earlier run in {workdir}")
    ids = {j.job_id for j in leftovers}
    deadline = time.monotonic() + wait_s
    while True:
        # A cancelled job leaves squeue's default listing once SLURM has stopped its processes (COMPLETING until
        # then): only after that is its device free for this run's servers.
        left = [j for j in active_jobs() if j.job_id in ids]
        if not left:
            return leftovers
        if time.monotonic() > deadline:
            raise SlurmError(
                f"leftover SLURM jobs still active {wait_s:.0f} s after scancel: "
                + ", ".join(j.describe() for j in left)
                + "; check them with `squeue`, cancel them with `scancel`, then start the run again"
            )
        time.sleep(poll_s)
