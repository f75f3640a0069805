"""One measuring job per device, whatever else runs on the machine.

Snakemake's scheduler keeps server jobs of one run apart (they ask for the ``lorabench_device`` resource, of
which the default workflow profile has one per device); this module keeps everything else out. Before a server
starts, its job takes an exclusive lock on one device (``{lock dir}/{device}.lock``, machine-wide) and checks that
no live inference server outside this job is using it: on a GPU, the processes nvidia-smi lists on that device;
on a CPU-only host, any live process that looks like an engine's server (each engine module names its
processes). A device in use makes the job fail with an error naming the process, before any server starts.

Devices: the GPUs nvidia-smi lists (or ``LORABENCH_DEVICES``, a comma-separated list of GPU indices, which also
simulates several GPUs on a machine without them); on a CPU-only host, one device, ``cpu``. A GPU job's server
sees only its device (``CUDA_VISIBLE_DEVICES``).

``LORABENCH_FOREIGN_SERVERS=ignore`` drops the check for servers outside the job (the lock stays): for runs that
share a machine on purpose and whose figures do not count, such as the test suite's two workers, each with a lock
directory of its own (``LORABENCH_LOCK_DIR``). A job measured so says it in its facts (``device_check``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .resources import nvidia_smi, proc_stat


class DeviceBusy(RuntimeError):
    """The device (or every device) is in use by a process outside this job; the message names it."""


def lock_dir() -> Path:
    d = Path(os.environ.get("LORABENCH_LOCK_DIR") or Path(tempfile.gettempdir()) / "lorabench-locks")
    d.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        d.chmod(0o1777)
    return d


def devices(hardware: str) -> list[str]:
    """Device names of this machine: GPU indices as strings, or ``["cpu"]``."""
    sim = os.environ.get("LORABENCH_DEVICES")
    if sim:
        return [d.strip() for d in sim.split(",") if d.strip()]
    out = nvidia_smi("--query-gpu=index", "--format=csv,noheader") if hardware == "gpu" else None
    if out is None:
        return ["cpu"]
    found = [line.strip() for line in out.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        found = [d for d in found if d in {v.strip() for v in visible.split(",")}]
    return found or ["cpu"]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _ancestors_and_self() -> set[int]:
    out = {os.getpid()}
    pid = os.getpid()
    while pid > 1:
        stat = proc_stat(pid)
        if stat is None:
            break
        pid = int(stat[1])
        out.add(pid)
    return out


def gpu_users(device: str) -> list[str]:
    """Processes nvidia-smi lists on one GPU, as 'pid name (MiB)'."""
    if not device.isdigit() or os.environ.get("LORABENCH_DEVICES"):
        return []
    out = nvidia_smi("-i", device, "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
    if out is None:
        return []
    users = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            users.append(f"pid {parts[0]} {parts[1]} ({parts[2]} MiB)")
    return users


def server_processes(markers: tuple[str, ...]) -> list[str]:
    """Live processes outside this job's own ancestry whose command line or name matches an engine's marker."""
    mine = _ancestors_and_self()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in mine:
            continue
        pid = int(d.name)
        cmd, comm = _cmdline(pid), _comm(pid)
        if any(m in cmd or m == comm for m in markers):
            found.append(f"pid {pid} ({cmd[:160] or comm})")
    return found


FOREIGN_SERVERS = "LORABENCH_FOREIGN_SERVERS"


def foreign_servers_checked() -> bool:
    """Whether a job looks for servers outside it before it measures (``LORABENCH_FOREIGN_SERVERS``: ``refuse``,
    the default, or ``ignore``)."""
    value = os.environ.get(FOREIGN_SERVERS, "refuse")
    if value not in ("refuse", "ignore"):
        raise ValueError(f"{FOREIGN_SERVERS}={value!r}: expected 'refuse' (the default) or 'ignore'")
    return value == "refuse"


@dataclass
class DeviceLease:
    device: str
    path: Path
    foreign_checked: bool = True

    @property
    def env(self) -> dict[str, str]:
        """What the server's environment needs to see only this device."""
        return {"CUDA_VISIBLE_DEVICES": self.device} if self.device != "cpu" else {}


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "unknown process"
    except OSError:
        return "unknown process"


@contextlib.contextmanager
def acquire(hardware: str, markers: tuple[str, ...], job: str) -> Iterator[DeviceLease]:
    """Hold one free device for the duration of the block, or fail naming what uses the devices."""
    busy: list[str] = []
    checked = foreign_servers_checked()
    for dev in devices(hardware):
        path = lock_dir() / f"{dev}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            busy.append(f"device {dev}: held by another measuring job, {_holder(path)}")
            continue
        foreign = [] if not checked else gpu_users(dev) if dev != "cpu" else server_processes(markers)
        if foreign:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            busy.append(f"device {dev}: in use by a server outside this run: {'; '.join(foreign[:3])}")
            continue
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} ({job})\n".encode())
        try:
            yield DeviceLease(dev, path, checked)
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return
    raise DeviceBusy(
        f"{job}: no free device to measure on, so no server was started:\n  "
        + "\n  ".join(busy)
        + "\nStop that process (or wait for it), then run again."
    )
