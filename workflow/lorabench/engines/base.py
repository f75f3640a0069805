"""The engine interface: command line, adapter naming, readiness, runtime adapter loading, logs and metrics."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

_REGISTRY: dict[str, type[Engine]] = {}


def setting(*, column: bool = True, lora_only: bool = False, **kw: Any) -> Any:
    """A server setting read from ``servers.ID`` in the study config by the field's own name (the config schema
    describes it) and recorded in the server's facts (``facts.json`` ``config``); ``column``: also a column of the
    summary tables; ``lora_only``: an error in the config of a server with LoRA off."""
    if "default_factory" not in kw:
        kw.setdefault("default", None)
    return field(metadata={"setting": True, "column": column, "lora_only": lora_only}, **kw)


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    """How one server configuration starts, in plain values (what its job depends on); files are named, not yet
    resolved. A new server setting is one field here marked ``setting()`` plus its key in the config schema."""

    server_id: str
    engine: str  # registered engine kind, e.g. "vllm"
    served_name: str
    lora: bool = setting(default=False)
    max_loras: int | None = setting(lora_only=True)
    max_cpu_loras: int | None = setting(lora_only=True)
    max_lora_rank: int | None = setting(lora_only=True)
    args: dict[str, Any] = setting(column=False, default_factory=dict)  # further engine flags, no leading dashes
    runtime_lora: bool = False  # allow runtime load/unload
    # Compilation cache: a folder shared by the servers of a study, "off" to disable the engine's cache, or ""
    # for the engine's default place.
    compile_cache: str = ""
    env: dict[str, str] = field(default_factory=dict)  # extra environment variables for the server process only


def server_settings() -> tuple[str, ...]:
    """The fields of ``ServerSettings`` read from ``servers.ID`` by name, in declaration order."""
    return tuple(f.name for f in fields(ServerSettings) if f.metadata.get("setting"))


def models_listed_ok(probes: dict[str, Any], adapters: list[str]) -> bool | None:
    """Whether a server's ``/v1/models`` listed every adapter under its own name and the base model beside them
    (``probes["models_listed"]``, what the server answered), which is how OpenAI-compatible servers list what
    they serve; the name a request selects an adapter by may differ (SGLang's ``BASE:ADAPTER``). None where the
    listing was not recorded (the probe's own verdict, where it has one)."""
    listed = probes.get("models_listed")
    if listed is None:
        return probes.get("models_listed_ok")
    names = set(listed)
    return set(adapters) <= names and bool(names - set(adapters))


def server_columns() -> tuple[str, ...]:
    """The server settings that are columns of the summary tables."""
    return tuple(f.name for f in fields(ServerSettings) if f.metadata.get("setting") and f.metadata["column"])


def lora_settings() -> tuple[str, ...]:
    """The server settings that only a server with LoRA on may give."""
    return tuple(f.name for f in fields(ServerSettings) if f.metadata.get("lora_only"))


@dataclass(frozen=True, kw_only=True)
class ServerSpec(ServerSettings):
    """A server ready to start: its settings with the files resolved (interpreter, weights, adapters)."""

    python: str  # interpreter of the engine's environment
    model_path: str
    adapters: dict[str, str] = field(default_factory=dict)  # adapter name -> path, loaded at start-up


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def flags_from_args(args: dict[str, Any]) -> list[str]:
    """Turn ``{"max_model_len": 512, "enforce_eager": true}`` into engine flags (sorted, booleans as switches)."""
    out: list[str] = []
    for key in sorted(args):
        value = args[key]
        if value is None or value is False:
            continue
        if value is True:
            out.append(_flag(key))
        elif isinstance(value, list):
            out += [_flag(key), *(str(v) for v in value)]
        else:
            out += [_flag(key), str(value)]
    return out


def launch_argv(spec: ServerSpec, module: str, model_flag: str, host: str, port: int) -> list[str]:
    """``python -m MODULE MODEL_FLAG PATH --served-model-name NAME --host HOST --port PORT``: how both engines'
    OpenAI-compatible servers start."""
    return [spec.python, "-m", module, model_flag, spec.model_path, "--served-model-name", spec.served_name,
            "--host", host, "--port", str(port)]  # fmt: skip


def lora_argv(spec: ServerSpec, flags: dict[str, str], adapters_flag: str) -> list[str]:
    """The LoRA flags of a server with LoRA on (none with it off): ``--enable-lora``, then each setting of ``spec``
    named in ``flags`` (attribute -> engine flag) that is set, in that order, then the adapters loaded at start-up
    as ``adapters_flag name=path ...``, by name."""
    if not spec.lora:
        return []
    argv = ["--enable-lora"]
    for attr, flag in flags.items():
        if (value := getattr(spec, attr)) is not None:
            argv += [flag, str(value)]
    if spec.adapters:
        argv += [adapters_flag, *(f"{n}={p}" for n, p in sorted(spec.adapters.items()))]
    return argv


class Engine(ABC):
    """One inference engine. Implementations hold no state; every method is a pure function of its inputs."""

    name: ClassVar[str]
    ready_path: ClassVar[str] = "/v1/models"
    metrics_path: ClassVar[str] = "/metrics"
    # Prometheus metric names worth sampling during a measurement (prefix match).
    metric_prefixes: ClassVar[tuple[str, ...]] = ()
    # Sampled series (a "reason" label folded into the name as NAME_REASON) under the neutral names the summary
    # and the report use: running, waiting, deferred (waiting for an adapter slot), kv_cache_usage, preemptions.
    metric_names: ClassVar[dict[str, str]] = {}
    # What this engine's server processes look like (a command-line fragment or a process name), so that a live
    # server left by another run is recognised before a measurement shares its device.
    server_markers: ClassVar[tuple[str, ...]] = ()
    # Threads (their names as /proc gives them, at most 15 characters) that spin while they wait for work: one full
    # CPU on such a thread is its loop, not a sign that the engine is bound by it (``summary.thread_bound``).
    polling_threads: ClassVar[tuple[str, ...]] = ()
    # Capabilities: a host-side adapter cache with its own size (vLLM --max-cpu-loras).
    has_cpu_adapter_cache: ClassVar[bool] = False
    # Adapter slots per batch where a LoRA server's max_loras is left unset (the engine's own default), and whether
    # base-model requests in a LoRA batch take a slot of their own: how a burst passes the slots
    # (``loadgen.workload.slot_rounds``; benchmarks/slot_rounds.py).
    default_max_loras: ClassVar[int | None] = None
    base_takes_slot: ClassVar[bool] = False
    # The largest adapter rank a LoRA server accepts where its max_lora_rank is left unset; None: the largest rank
    # of the adapters it loads at start (an adapter loaded at run time may not exceed it).
    default_max_lora_rank: ClassVar[int | None] = None
    # Server flags (as ``args``) under which a completion's usage reports the prompt tokens served from the
    # prefix cache (``usage.prompt_tokens_details.cached_tokens``); empty where the engine has none.
    cached_tokens_args: ClassVar[dict[str, Any]] = {}
    # The server flag (as ``args``) that sets the longest prompt plus output a request may have; None: the model's.
    context_arg: ClassVar[str | None] = None
    # Whether a LoRA server builds its LoRA layers for the union of the served adapters' target modules (where the
    # config names none), so that every adapter request runs over each module any served adapter targets: an
    # adapter's own targets then do not say what it costs on that server (the report says so beside its rank table).
    lora_layers_union: ClassVar[bool] = False

    @abstractmethod
    def command(self, spec: ServerSpec, host: str, port: int) -> list[str]:
        """The server's argv (no shell)."""

    def environment(self, spec: ServerSpec) -> dict[str, str]:
        """Environment variables the engine needs on top of the spec's own."""
        return {}

    def compile_cache_env(self, cache: str) -> dict[str, str]:
        """Environment that puts the engine's compilation cache in the folder ``cache`` ("off": disabled)."""
        return {}

    def lora_sets(self, sample: dict[str, Any]) -> tuple[str, str] | None:
        """For a metric sample that lists adapters in flight: (running adapters, waiting adapters), else None."""
        return None

    def api_key_env(self, key: str) -> dict[str, str]:
        """Environment that makes the server require ``key`` (preferred: the environment of a process is not
        readable by other users, its command line is)."""
        return {}

    def api_key_args(self, key: str) -> list[str]:
        """Flags that make the server require ``key``, for engines that take it on the command line only."""
        return []

    def cpu_threads_env(self, cpus: tuple[int, ...]) -> dict[str, str]:
        """Environment that keeps the engine's compute threads on ``cpus`` (CPU builds; empty where the engine
        has no such setting)."""
        return {}

    @abstractmethod
    def request_model(self, spec: ServerSpec, adapter: str | None) -> str:
        """The ``model`` field of a request that should use ``adapter`` (None or "base" for the base model)."""

    @abstractmethod
    def load_adapter_request(self, name: str, path: str) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) of the runtime adapter-load call."""

    @abstractmethod
    def unload_adapter_request(self, name: str) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) of the runtime adapter-unload call."""

    @abstractmethod
    def version_code(self) -> str:
        """Python code that prints the engine's version when run with the engine's interpreter."""

    def parse_log(self, text: str) -> dict[str, Any]:
        """Server facts read from the engine's log: KV-cache capacity, graph captures, attention backend."""
        return {}

    def check(self, spec: ServerSpec) -> None:
        """Reject a configuration the engine would refuse, naming the key, before a server starts."""
        if spec.lora and not spec.adapters and not spec.runtime_lora:
            raise ValueError(f"servers.{spec.server_id}: lora is on but no adapters are listed")
        if not spec.lora and spec.adapters:
            raise ValueError(f"servers.{spec.server_id}: adapters given but lora is off")


def register(cls: type[Engine]) -> type[Engine]:
    _REGISTRY[cls.name] = cls
    return cls


def get_engine(name: str) -> Engine:
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown engine kind {name!r}; registered: {sorted(_REGISTRY)}") from None


def registered_engines() -> list[str]:
    return sorted(_REGISTRY)


def all_server_markers() -> tuple[str, ...]:
    return tuple(m for cls in _REGISTRY.values() for m in cls.server_markers)


def all_polling_threads() -> frozenset[str]:
    """Every registered engine's ``polling_threads``."""
    return frozenset(t for cls in _REGISTRY.values() for t in cls.polling_threads)


def first_match(pattern: str, text: str, cast: type = str) -> Any:
    m = re.search(pattern, text)
    if not m:
        return None
    try:
        return cast(m.group(1).replace(",", ""))
    except ValueError:
        return None


def adapter_path_allowed(path: str, allowed: dict[str, str]) -> bool:
    """Runtime loads are restricted to adapters the pipeline built or the config lists."""
    resolved = str(Path(path).resolve())
    return any(resolved == str(Path(p).resolve()) for p in allowed.values())
