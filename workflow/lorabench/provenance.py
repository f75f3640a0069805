"""Provenance of a study run: code commit, dates, machine, engine versions, adapter and model hashes, config."""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import __version__
from .resources import machine_facts


def code_commit(repo: Path) -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        # published results (studies/) are not code: a study being written there leaves the code clean
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)studies"))
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", False
    return {"commit": commit or "unknown", "dirty": dirty}


def collect(
    config: dict[str, Any],
    model: dict[str, Any],
    adapters: list[dict[str, Any]],
    envs: list[dict[str, Any]],
    server_facts: dict[str, Any],
    checkout: Path,
) -> dict[str, Any]:
    """Provenance of a rendered report; ``checkout``: the lorabench checkout whose commit is recorded."""
    machines = {s: f.get("machine") for s, f in server_facts.items() if f.get("machine")}
    return {
        "lorabench_version": __version__,
        "code": code_commit(checkout),
        "rendered_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "render_machine": machine_facts(),
        "measurement_machines": machines,
        "engines": [
            {k: e.get(k) for k in ("engine", "kind", "version", "source", "python", "status", "venv")} for e in envs
        ],
        "model": {
            k: model.get(k) for k in ("name", "source", "architecture_file", "parameters", "dtype", "seed", "path")
        }
        | {"files": model.get("files")},
        "adapters": [
            {
                k: a.get(k)
                for k in (
                    "name",
                    "rank",
                    "alpha",
                    "target_modules",
                    "seed",
                    "source_path",
                    "trainable_parameters",
                    "bytes_on_disk",
                    "files",
                )
            }
            for a in adapters
        ],
        "config": config,
    }
