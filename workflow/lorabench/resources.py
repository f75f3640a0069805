"""Machine facts: GPU memory (nvidia-smi), host memory of a process group, CPU and GPU descriptions."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any


def nvidia_smi(*args: str) -> str | None:
    """What ``nvidia-smi ARGS`` prints, or None where there is no NVIDIA GPU (or the call fails)."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=10, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None


def gpu_memory() -> list[dict[str, Any]] | None:
    """Per-GPU used/total MiB from nvidia-smi, or None where there is no NVIDIA GPU."""
    out = nvidia_smi("--query-gpu=index,name,memory.used,memory.total,driver_version", "--format=csv,noheader,nounits")
    if out is None:
        return None
    rows = []
    for line in out.strip().splitlines():
        idx, name, used, total, driver = (x.strip() for x in line.split(","))
        rows.append({"index": int(idx), "name": name, "used_mib": int(used), "total_mib": int(total), "driver": driver})
    return rows


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, pgrp, ...), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def group_pids(pgid: int) -> list[int]:
    """Live processes of a process group (Linux /proc)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) == pgid:
                    pids.append(int(d.name))
            except (OSError, ProcessLookupError):
                continue
    return pids


def group_rss_mib(pgid: int) -> float | None:
    """Resident memory of every process in a process group, in MiB (Linux /proc)."""
    total = 0
    found = False
    for pid in group_pids(pgid):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    found = True
        except (OSError, ValueError):
            continue
    return total / 1024 if found else None


def machine_facts() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpus = gpu_memory()
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "hardware": "gpu" if gpus else "cpu",
    }
