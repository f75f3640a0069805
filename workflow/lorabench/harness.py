"""What the harness does to keep its own noise out of a measurement, each part switchable so that
``benchmarks/stability.py`` can measure it on and off:

- ``gc``: collect, freeze and disable Python's garbage collector while a measurement runs (``freeze``), or
  leave it alone (``on``). A collection in the client's process stalls every stream it is reading.
- ``metrics``: scrape the engine's ``/metrics`` only between bursts (``between``), also while requests are in
  flight (``during``, every ``metrics_interval_s``), or never (``off``). Warm-up bursts are always scraped
  during, so queue depths (running, waiting, deferred) are still seen for every condition.
- ``pin``: put the client, the engine's API server and its compute threads on separate CPUs (``auto``) or let
  the kernel place them (``off``). On a CPU-only host the engine (its scheduler, workers and compute threads)
  gets every CPU but the first, the client and the engine's HTTP front end share the first; on a GPU host the
  client gets the last CPU to itself.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .resources import group_threads

GC_MODES = ("freeze", "on")
METRICS_MODES = ("between", "during", "off")
PIN_MODES = ("auto", "off")
DEFAULTS: dict[str, str] = {"gc": "freeze", "metrics": "between", "pin": "auto"}


def settings(raw: dict[str, Any] | None) -> dict[str, str]:
    """The harness settings with defaults filled; a bad value is an error naming the key."""
    out = {**DEFAULTS, **(raw or {})}
    for key, allowed in (("gc", GC_MODES), ("metrics", METRICS_MODES), ("pin", PIN_MODES)):
        if out[key] not in allowed:
            raise ValueError(f"harness.{key}: {out[key]!r} is not one of {list(allowed)}")
    unknown = sorted(set(out) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown key(s): {', '.join('harness.' + k for k in unknown)}")
    return out


@contextlib.contextmanager
def quiet_gc(mode: str = "freeze") -> Iterator[None]:
    """No garbage collection inside the block: garbage is collected first, what is alive is frozen (moved out of
    the collector's generations for good), and the collector is off until the block ends."""
    if mode != "freeze":
        yield
        return
    was_enabled = gc.isenabled()
    gc.collect()
    # Frozen objects stay frozen: a job's records live until it ends, and later collections then scan only what
    # is new instead of everything measured so far.
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True)
class CpuPlan:
    """Which CPUs the client, the server's processes and the engine's compute threads may use (None: any)."""

    client: tuple[int, ...] | None = None
    server: tuple[int, ...] | None = None
    engine_threads: tuple[int, ...] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "client": list(self.client) if self.client else None,
            "server": list(self.server) if self.server else None,
            "engine_threads": list(self.engine_threads) if self.engine_threads else None,
        }


def plan_cpus(mode: str, hardware: str, cpus: list[int] | None = None) -> CpuPlan:
    """Where each part runs. With fewer than two CPUs (or ``off``) nothing is pinned."""
    avail = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if mode == "off" or len(avail) < 2:
        return CpuPlan()
    if hardware == "gpu":
        return CpuPlan(client=(avail[-1],), server=tuple(avail[:-1]))
    return CpuPlan(client=(avail[0],), server=(avail[0],), engine_threads=tuple(avail[1:]))


def cpu_list(cpus: tuple[int, ...]) -> str:
    """``(1, 2, 3, 5)`` as ``1-3,5`` (the kernel's and OpenMP's list syntax)."""
    parts: list[str] = []
    start = prev = cpus[0]
    for c in [*cpus[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(parts)


def pin_self(cpus: tuple[int, ...] | None) -> None:
    if cpus:
        os.sched_setaffinity(0, set(cpus))


def confine_group(pgid: int, plan: CpuPlan) -> dict[str, int]:
    """Once a CPU build's server is ready: the group leader (the HTTP front end) onto ``plan.server``, every
    other process of the group (the engine's scheduler and workers, whose loops poll busily) onto
    ``plan.engine_threads``. Threads the engine already bound inside those CPUs stay where they are. The server
    cannot be confined before it starts: OpenMP drops places outside the mask a process starts with."""
    counts = {"front_end": 0, "engine": 0, "kept": 0}
    if not plan.server or not plan.engine_threads:
        return counts
    engine = set(plan.engine_threads)
    for pid, tids in group_threads(pgid).items():
        for tid in tids:
            try:
                if pid == pgid:
                    os.sched_setaffinity(tid, set(plan.server))
                    counts["front_end"] += 1
                elif os.sched_getaffinity(tid) <= engine:
                    counts["kept"] += 1
                else:
                    os.sched_setaffinity(tid, engine)
                    counts["engine"] += 1
            except OSError:
                continue
    return counts


class GpuPoller:
    """nvidia-smi run every ``interval_s`` in a thread: what a harness that samples GPU memory while requests
    are in flight costs (only ``benchmarks/stability.py`` uses it; the pipeline samples between measurements)."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples = 0

    def _run(self) -> None:
        from .resources import gpu_memory

        while not self._stop.wait(self.interval_s):
            if gpu_memory() is not None:
                self.samples += 1

    def __enter__(self) -> GpuPoller:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=15)
