"""Machine facts: GPU memory (nvidia-smi), host memory of a process group, CPU and GPU descriptions."""

from __future__ import annotations

import os
import platform
import resource
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc ticks per second


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


class GpuTelemetry:
    """Clocks, power, temperature, utilisation and clock-limit reasons of one GPU, sampled by a single
    ``nvidia-smi --loop-ms`` process for the life of a server job (each line stamped on arrival, so no clock of
    nvidia-smi's is parsed) and summarised per measurement window: when throughput moves between measurements,
    these say whether the GPU's own state moved with it. Inactive where there is no NVIDIA GPU."""

    FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "utilization.gpu")
    REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # newer name first

    def __init__(self, device: str = "0", interval_ms: int = 200, cpus: tuple[int, ...] | None = None) -> None:
        self.device, self.interval_ms, self.cpus = device, interval_ms, cpus
        self.rows: list[tuple[float, list[str]]] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def _fields(self) -> list[str] | None:
        for reason in (*self.REASONS, None):
            fields = [*self.FIELDS, *([reason] if reason else [])]
            if nvidia_smi("-i", self.device, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"):
                return fields
        return None

    def __enter__(self) -> GpuTelemetry:
        fields = self._fields() if self.device != "cpu" else None
        if fields is None:
            return self
        cpus = self.cpus
        self.proc = subprocess.Popen(
            ["nvidia-smi", "-i", self.device, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits",
             f"--loop-ms={self.interval_ms}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            # away from the client's CPUs where the job gives the server its own
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.rows.append((time.time(), [x.strip() for x in line.split(",")]))

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            if self._reader is not None:
                self._reader.join(timeout=5)

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        """Summary of the samples stamped between ``t0`` and ``t1`` (time.time()); empty without samples."""
        return summarize_gpu_samples([v for t, v in self.rows if t0 <= t <= t1])


def summarize_gpu_samples(samples: list[list[str]]) -> dict[str, Any]:
    """Mean and least SM clock, mean memory clock, power and utilisation, highest temperature, and the clock-limit
    reasons seen (bit mask OR-ed over the samples; 0x1 is plain idle, others are power, thermal or other caps)."""

    def num(i: int) -> list[float]:
        out = []
        for v in samples:
            try:
                out.append(float(v[i]))
            except (IndexError, ValueError):
                pass
        return out

    sm, mem, power, temp, util = (num(i) for i in range(5))
    if not sm:
        return {}
    reasons = 0
    for v in samples:
        try:
            reasons |= int(v[5], 16)
        except (IndexError, ValueError):
            pass
    mean = lambda xs: round(sum(xs) / len(xs), 1) if xs else None  # noqa: E731
    return {
        "gpu_samples": len(sm),
        "gpu_sm_mhz_mean": mean(sm),
        "gpu_sm_mhz_min": min(sm),
        "gpu_mem_mhz_mean": mean(mem),
        "gpu_power_w_mean": mean(power),
        "gpu_util_pct_mean": mean(util),
        "gpu_temp_c_max": max(temp) if temp else None,
        "gpu_clock_reasons": hex(reasons) if any(len(v) > 5 for v in samples) else None,
    }


class HostTelemetry:
    """Where the host's CPU time went during each measurement window, from /proc before and after it (nothing
    is read while requests are in flight): CPU time stolen by the hypervisor, how many CPUs were busy, how many
    CPUs' worth the engine's processes used, the engine's busiest thread (its share of one CPU, how often the
    kernel preempted it and how often it waited by itself, which CPU it ran on at either end of the window, how
    often the kernel moved it to another CPU, and the time stolen from the CPU it ran on), the load client's own
    CPU share and preemptions (this process), and how long a fixed piece of work takes on the client's CPU at
    either end of the window (longer where the host runs slower or that CPU is busier). An engine whose
    scheduler loop runs on one host thread is as fast as that thread, and a client as fast as its CPU: where
    throughput moves between measurements while the GPU's clocks hold, these say whether the host moved.

    The host's average steal hides one CPU's: a thread on one of 16 CPUs that loses a tenth of its time moves
    the average by 0.6 %, so the steal of the busiest thread's own CPU is kept apart."""

    def __init__(self, pgid: int | None) -> None:
        self.pgid = pgid
        self.top: tuple[int, int] | None = None  # (pid, tid) of the last window's busiest thread

    @staticmethod
    def _cpu() -> dict[str, list[int]]:
        """The time counters of /proc/stat's ``cpu`` line (all CPUs) and of each ``cpuN`` line, by name."""
        out: dict[str, list[int]] = {}
        try:
            for ln in Path("/proc/stat").read_text().splitlines():
                if not ln.startswith("cpu"):
                    break
                name, *vals = ln.split()
                out[name] = [int(x) for x in vals]
        except (OSError, ValueError):
            return {}
        return out

    def _threads(self) -> dict[int, tuple[str, int, int, int, int | None, int]]:
        """Per engine thread: name, user+system ticks, involuntary and voluntary context switches, the CPU it
        last ran on, and its process id."""
        out: dict[int, tuple[str, int, int, int, int | None, int]] = {}
        for pid, tids in (group_threads(self.pgid) if self.pgid else {}).items():
            for tid in tids:
                stat = proc_stat(pid, tid)
                task = Path(f"/proc/{pid}/task/{tid}")
                try:
                    name = (task / "comm").read_text().strip()
                    sw = dict(
                        ln.split(":", 1) for ln in (task / "status").read_text().splitlines() if "ctxt_switches" in ln
                    )
                    nv, vol = int(sw["nonvoluntary_ctxt_switches"]), int(sw["voluntary_ctxt_switches"])
                    ticks = int(stat[11]) + int(stat[12]) if stat else None
                except (OSError, ValueError, IndexError, KeyError):
                    continue
                cpu = int(stat[36]) if stat and len(stat) > 36 and stat[36].isdigit() else None
                if ticks is not None:
                    out[tid] = (name, ticks, nv, vol, cpu, pid)
        return out

    @staticmethod
    def _migrations(pid: int, tid: int) -> int | None:
        """How often the kernel has moved a thread to another CPU so far (``se.nr_migrations`` of its sched file,
        present where the kernel keeps scheduler statistics), or None."""
        try:
            for ln in Path(f"/proc/{pid}/task/{tid}/sched").read_text().splitlines():
                if ln.startswith("se.nr_migrations"):
                    return int(ln.split(":")[1])
        except (OSError, ValueError, IndexError):
            pass
        return None

    @staticmethod
    def _client() -> tuple[float, int]:
        """This process's CPU seconds (user + system, all threads) and involuntary context switches: the load
        client's own, since it measures from here. A client that fills its CPU delays the tokens it reads."""
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime, ru.ru_nivcsw

    @staticmethod
    def cpu_probe_ms(loops: int = 50_000, tries: int = 3) -> float:
        """Milliseconds this CPU takes for a fixed piece of Python work (the fastest of ``tries``): longer while
        the host's cores run slower (frequency, a busy neighbour on the same core) or while other work shares
        this CPU; it cannot tell the two apart, and the engine's own counters cannot tell a slower CPU from more
        work."""
        best = float("inf")
        for _ in range(tries):
            t0 = time.perf_counter()
            x = 0
            for i in range(loops):
                x ^= i * 7
            best = min(best, time.perf_counter() - t0)
        return 1000 * best

    def snapshot(self) -> dict[str, Any]:
        threads = self._threads()
        if self.top is None or self.top[1] not in threads:
            # before the first window: the thread with the most CPU time so far is the likeliest busiest one
            busiest = max(threads, key=lambda t: threads[t][1], default=None)
            self.top = (threads[busiest][5], busiest) if busiest is not None else None
        top = self.top
        return {
            "t": time.monotonic(),
            "cpu": self._cpu(),
            "threads": threads,
            "top": (top[1], self._migrations(*top)) if top else None,
            "client": self._client(),
            "probe_ms": self.cpu_probe_ms(),
        }

    def window(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        """The window between two snapshots, summarised; empty where /proc could not be read."""
        secs = b["t"] - a["t"]
        ca, cb = a["cpu"].get("cpu"), b["cpu"].get("cpu")
        if secs <= 0 or not ca or not cb or len(ca) != len(cb):
            return {}
        d = [y - x for x, y in zip(ca, cb, strict=True)]
        total = sum(d[:8]) or 1  # user nice system idle iowait irq softirq steal (guest time is inside user)
        out: dict[str, Any] = {
            "host_steal_pct": round(100 * d[7] / total, 2) if len(d) > 7 else None,
            "host_busy_cpus": round((total - d[3] - d[4]) / total * (os.cpu_count() or 1), 2),
        }
        if "client" in a and "client" in b:
            out["client_cpu_pct"] = round(100 * (b["client"][0] - a["client"][0]) / secs, 1)
            out["client_preempted_per_s"] = round((b["client"][1] - a["client"][1]) / secs, 1)
        if "probe_ms" in a and "probe_ms" in b:
            out["host_cpu_probe_ms"] = round((a["probe_ms"] + b["probe_ms"]) / 2, 3)
        used = {t: (v[0], v[1] - a["threads"][t][1], v[2] - a["threads"][t][2], v[3] - a["threads"][t][3])
                for t, v in b["threads"].items() if t in a["threads"]}  # fmt: skip
        if used:
            tid = max(used, key=lambda t: used[t][1])
            name, ticks, nv, vol = used[tid]
            out.update(
                engine_cpus=round(sum(v[1] for v in used.values()) / CLOCK_TICKS / secs, 2),
                engine_top_thread=name,
                engine_top_thread_pct=round(100 * ticks / CLOCK_TICKS / secs, 1),
                engine_top_thread_preempted_per_s=round(nv / secs, 1),
                engine_top_thread_waits_per_s=round(vol / secs, 1),
            )
            out.update(self._top_cpu(tid, a, b, secs))
            self.top = (b["threads"][tid][5], tid)
        return out

    def _top_cpu(self, tid: int, a: dict[str, Any], b: dict[str, Any], secs: float) -> dict[str, Any]:
        """Where the window's busiest thread ran: its CPU at either end ("3" or "3>7"), how often the kernel
        moved it (where the same thread was followed from the window's start), and the time stolen from the
        CPUs it was seen on."""
        out: dict[str, Any] = {}
        cpus = [c for c in (a["threads"][tid][4], b["threads"][tid][4]) if c is not None]
        if cpus:
            out["engine_top_thread_cpu"] = ">".join(dict.fromkeys(str(c) for c in cpus))
            stolen = []
            for c in dict.fromkeys(cpus):
                x, y = a["cpu"].get(f"cpu{c}"), b["cpu"].get(f"cpu{c}")
                if x and y and len(x) > 7 and len(x) == len(y):
                    dd = [q - p for p, q in zip(x, y, strict=True)]
                    stolen.append(100 * dd[7] / (sum(dd[:8]) or 1))
            if stolen:
                out["engine_top_cpu_steal_pct"] = round(sum(stolen) / len(stolen), 2)
        ta, tb = a.get("top"), b.get("top")
        if ta and tb and ta[0] == tid and tb[0] == tid and ta[1] is not None and tb[1] is not None:
            out["engine_top_thread_migrations_per_s"] = round((tb[1] - ta[1]) / secs, 1)
        return out


def proc_stat(pid: int, tid: int | None = None) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, pgrp, ...), or None when it is gone;
    with ``tid``, those of that one thread (/proc/PID/task/TID/stat: /proc/TID/stat would give the whole
    process's CPU times for any of its threads)."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid is not None else f"/proc/{pid}/stat"
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
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


def group_threads(pgid: int) -> dict[int, list[int]]:
    """Thread ids of every process in a process group, by process id (Linux /proc)."""
    out: dict[int, list[int]] = {}
    for pid in group_pids(pgid):
        try:
            out[pid] = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
    return out


def cpu_share(ticks0: int | None, ticks1: int | None, seconds: float) -> float | None:
    """The share of one CPU that ``cpu_ticks`` read before and after ``seconds`` of wall time come to (rounded to
    a thousandth); None where either read found nothing or no time passed."""
    if ticks0 is None or ticks1 is None or not seconds > 0:
        return None
    return round((ticks1 - ticks0) / CLOCK_TICKS / seconds, 3)


def cpu_ticks(pid: int, tid: int | None = None) -> int | None:
    """User and system CPU time so far of a process (all its threads) or, with ``tid``, of one of its threads,
    in clock ticks; None when it is gone."""
    stat = proc_stat(pid, tid)
    try:
        return int(stat[11]) + int(stat[12]) if stat else None
    except (IndexError, ValueError):
        return None


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


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    """This boot of this machine (Linux's random boot id; "" elsewhere): two server jobs of one study with
    different boot ids ran on different machines (a study put together from several runs), and no interval of
    either covers what differs between the two."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def boot_ids(facts: list[dict[str, Any]] | None) -> dict[str, str]:
    """Server -> the boot id its job recorded (``boot_id``, in the summary's server facts; jobs that recorded none
    left out)."""
    return {f["server"]: str(f["boot_id"]) for f in facts or [] if f.get("boot_id")}


def other_machines(a: str | None, b: str | None) -> bool:
    """Whether two recorded boot ids (``boot_id``) say two jobs ran on different machines (or boots of one): both
    recorded and different; records without one say nothing."""
    return bool(a and b and a != b)


# The vector extensions CPU inference kernels choose between (vLLM's CPU backend among them): two hosts that name
# the same CPU family ("AMD EPYC") may differ in these and run the same model at different relative speeds.
CPU_ISA = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_identity(cpuinfo: str) -> dict[str, Any]:
    """From /proc/cpuinfo's first processor: its model name, "family F model M stepping S" (which generation a
    name like "AMD EPYC" is), and which of ``CPU_ISA`` it has."""
    first = cpuinfo.split("\n\n", 1)[0]
    fields: dict[str, str] = {}
    for line in first.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    ident = " ".join(f"{k} {fields[k]}" for k in ("cpu family", "model", "stepping") if k in fields)
    return {"cpu": fields.get("model name", ""), "cpu_id": ident, "cpu_isa": [f for f in CPU_ISA if f in flags]}


def machine_facts() -> dict[str, Any]:
    try:
        cpu = cpu_identity(Path("/proc/cpuinfo").read_text())
    except OSError:
        cpu = {"cpu": "", "cpu_id": "", "cpu_isa": []}
    gpus = gpu_memory()
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        **cpu,
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "hardware": "gpu" if gpus else "cpu",
        "boot_id": boot_id(),
    }
