"""A server job's facts (facts.json) as a typed record: written by the measuring jobs, read by the analysis (summary,
phases, queues). Its own module, beside both, so that the measuring jobs import no analysis code (editing the
analysis reruns no server job) and editing this format reruns both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MEMORY_KEYS = ("gpu_memory_before_mib", "gpu_memory_ready_mib", "gpu_memory_after_stop_mib", "host_rss_ready_mib",
               "host_rss_end_mib")  # fmt: skip


@dataclass(frozen=True)
class ServerFacts:
    """A server job's facts (facts.json): what ran (server, engine and version, the server's settings, its command
    line, the machine and device), whether it ran (``status``: ``ok`` or why not), how the harness measured, what the
    probes and the server's log said, readiness, where the job's time went, the per-adapter figures and the memory
    read around its starts. A job that did not run has only the head (server, engine, version, status, config,
    machine); older jobs lack some of the rest. ``memory`` holds the MEMORY_KEYS the job read, each None where
    nothing could be read (no NVIDIA GPU, a process gone)."""

    server: str
    engine: str
    engine_version: str | None
    status: str
    config: dict[str, Any]
    machine: dict[str, Any] | None = None
    argv: list[str] | None = None
    api_key_required: bool | None = None
    device: str | None = None
    device_check: str | None = None  # only where servers of other runs were ignored (device.FOREIGN_SERVERS)
    harness: dict[str, Any] | None = None
    measurement: dict[str, Any] | None = None
    probes: dict[str, Any] | None = None
    readiness_s: float | None = None
    readiness_starts_s: list[float] | None = None
    timing: dict[str, float] | None = None
    per_adapter: list[dict[str, Any]] | None = None
    log: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def gpu_used_mib(self, key: str) -> float | None:
        """The device memory used on every GPU at one of the MEMORY_KEYS reads, None where none was read."""
        g = (self.memory or {}).get(key)
        return sum(x["used_mib"] for x in g) if g else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"server": self.server, "engine": self.engine, "engine_version": self.engine_version,
                               "status": self.status, "config": self.config}  # fmt: skip
        for k in _FACTS_OPTIONAL:
            if (v := getattr(self, k)) is not None:
                out[k] = v
        return out | (self.memory or {})

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ServerFacts:
        unknown = set(d) - {"server", "engine", "engine_version", "status", "config", *_FACTS_OPTIONAL, *MEMORY_KEYS}
        if unknown:
            raise ValueError(f"facts of {d.get('server')}: unknown keys {sorted(unknown)}")
        memory = {k: d[k] for k in MEMORY_KEYS if k in d}
        return cls(d["server"], d["engine"], d.get("engine_version"), d.get("status", "ok"), d.get("config") or {},
                   **{k: d.get(k) for k in _FACTS_OPTIONAL}, memory=memory or None)  # fmt: skip


_FACTS_OPTIONAL = ("machine", "argv", "api_key_required", "device", "device_check", "harness", "measurement", "probes",
                   "readiness_s", "readiness_starts_s", "timing", "per_adapter", "log")  # fmt: skip
