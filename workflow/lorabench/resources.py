"""Machine facts: GPU memory (nvidia-smi), host memory of a process group, CPU and GPU descriptions."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any


def gpu_memory() -> list[dict[str, Any]] | None:
    """Per-GPU used/total MiB from nvidia-smi, or None where there is no NVIDIA GPU."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=index,name,memory.used,memory.total,driver_version",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    rows = []
    for line in out.strip().splitlines():
        idx, name, used, total, driver = (x.strip() for x in line.split(","))
        rows.append({"index": int(idx), "name": name, "used_mib": int(used), "total_mib": int(total), "driver": driver})
    return rows


def group_rss_mib(pgid: int) -> float | None:
    """Resident memory of every process in a process group, in MiB (Linux /proc)."""
    total = 0
    found = False
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getpgid(int(d.name)) != pgid:
                continue
            for line in (d / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    found = True
        except (OSError, ProcessLookupError, ValueError):
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
