"""The server job as one typed object.

Built once from the study config (``server_job``: the Snakemake rules' params and the benchmark scripts call it),
serialized once (``ServerJob.to_json``: the rule's params, sorted, so that Snakemake reruns a job exactly when
something that changes its measurement changes), and read by every consumer: the job scripts, the facts a job
writes, the summary, the tools that restore or rebuild studies.

A new server setting is one key under ``servers`` in the config schema plus one field of
``engines.base.ServerSettings`` marked ``setting()``; a new study-wide measurement setting is one top-level key in
the schema plus one field of ``ServerJob`` marked ``study()``. Both are read from the config by their own names.
"""

from __future__ import annotations

import copy
import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .config import ConfigError, schema_default, server_adapters
from .engines import get_engine
from .engines.base import ServerSettings, ServerSpec, server_settings
from .harness import settings as harness_settings
from .io import read_json, verify_manifest_files


def study(name: str) -> Any:
    """A field read from the top level of the study config by its own name (the same for every server), its
    default the schema's (config.schema_default: defaults are written once, in the schema)."""
    value = schema_default(name)
    if isinstance(value, dict | list):
        return field(metadata={"study": True}, default_factory=lambda: copy.deepcopy(value))
    return field(metadata={"study": True}, default=value)


@dataclass(frozen=True, kw_only=True)
class RuntimeLoad:
    """Runtime adapter loading (``runtime_load`` in the config, less the servers it applies to)."""

    adapter: str  # loaded at run time, not at start
    repeats: int = 3  # load / first request / warmed requests / unload cycles
    warmed_requests: int = 5  # requests after the first one, for the warmed median
    burst: int = 1  # requests per timed burst


@dataclass(frozen=True, kw_only=True)
class PrefixCache:
    """Prefix caching across adapters (``prefix_cache`` in the config, less the servers it applies to)."""

    prefix_words: int = 300  # words of the shared prefix, fresh for every pair and repeat
    repeats: int = 3  # times each ordered pair of models is tried


@dataclass(kw_only=True)
class ServerJob:
    """One server job: the server's settings, what it measures and how, in plain values."""

    server: ServerSettings
    engine_id: str = ""  # the config's id of the engine installation (results/envs/ENGINE_ID.json)
    engine_version: str = ""
    adapters: list[str] = field(default_factory=list)  # loaded at start, by name
    conditions: list[str] = field(default_factory=list)
    reference: str = ""  # the condition the others are compared with, paired per cycle (empty: the first)
    # conditions of another workload than the reference's: the condition of their own workload each is compared with
    references: dict[str, str] = field(default_factory=dict)
    bursts: list[int] = field(default_factory=list)
    repetitions: int = study("repetitions")  # at least this many cycles (one burst of every cell each)
    max_repetitions: int = study("max_repetitions")  # cycles go on up to this many until the targets are met
    target_points: float = study("target_points")  # ... until every paired comparison is within ± this
    target_ci_pct: float = study("target_ci_pct")  # ... and, on a server without comparisons, every cell
    max_measuring_s: float = study("max_measuring_s")  # ... or this many seconds of bursts
    stream: str = study("stream")  # throughput from non-streamed bursts, TTFT/ITL from streamed ones
    focus_cycles: bool = study("focus_cycles")  # after the minimum cycles, only the cells still needed
    warmup_bursts: int = study("warmup_bursts")
    outlier_fraction: float = study("outlier_fraction")  # bursts below this x their cell's median count as slow
    server_starts: int = study("server_starts")  # the server starts this many times in turn, cycles spread over them
    request_timeout_s: float = study("request_timeout_s")
    readiness_timeout_s: float = study("readiness_timeout_s")
    metrics_interval_s: float = study("metrics_interval_s")
    load: dict[str, Any] = study("load")
    harness: dict[str, str] = study("harness")
    shuffle_seed: int = 0  # the workload's seed: each cycle's order (cycles.cycle_order), the prefix job's texts
    hardware: str = ""  # "cpu" or "gpu"; detected when empty
    runnable: bool = True  # False: the engine needs a GPU this machine lacks

    def __post_init__(self) -> None:
        self.harness = harness_settings(self.harness)
        self.max_repetitions = max(self.max_repetitions, self.repetitions)

    @property
    def server_id(self) -> str:
        return self.server.server_id

    def to_json(self) -> str:
        """The job as the rule's params: sorted JSON of everything that changes its measurement."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServerJob:
        """The job from its params (``to_json``'s object); an unknown or missing key is an error naming it."""
        d = dict(d)
        return cls(
            server=_typed(ServerSettings, d.pop("server", None), "server"),
            **_known(cls, d, "", given=("server",)),
        )

    @classmethod
    def from_json(cls, text: str) -> ServerJob:
        return cls.from_dict(json.loads(text))

    def facts_config(self) -> dict[str, Any]:
        """The server's configuration as its facts record it (``facts.json`` ``config``)."""
        return {
            **{k: getattr(self.server, k) for k in server_settings()},
            "adapters": sorted(self.adapters),
            "conditions": list(self.conditions),
            "reference": self.reference or (self.conditions[0] if self.conditions else ""),
            "bursts": sorted(self.bursts),
            # only where some condition is of another workload than the reference's (older facts lack the key)
            **({"references": dict(sorted(self.references.items()))} if self.references else {}),
        }

    def measurement_facts(self) -> dict[str, Any]:
        """How the job measures, as its facts record it (``facts.json`` ``measurement``)."""
        return {
            "method": "cycles",
            "min_cycles": self.repetitions,
            "max_cycles": self.max_repetitions,
            "target_points": self.target_points,
            "target_ci_pct": self.target_ci_pct,
            "max_measuring_s": self.max_measuring_s,
            "stream": self.stream,
            "focus_cycles": self.focus_cycles,
            "outlier_fraction": self.outlier_fraction,
            "server_starts": self.server_starts,
        }


def _known(cls: type, d: dict[str, Any], where: str, given: tuple[str, ...] = ()) -> dict[str, Any]:
    """``d`` when its keys are fields of ``cls`` and every required field (but those ``given`` apart) is there."""
    unknown = sorted(set(d) - {f.name for f in fields(cls)} - set(given))
    if unknown:
        raise ValueError(f"server job: unknown key(s) {', '.join(where + k for k in unknown)}")
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    missing = sorted(set(required) - set(d) - set(given))
    if missing:
        raise ValueError(f"server job: missing key(s) {', '.join(where + k for k in missing)}")
    return d


def _typed(cls: type, d: Any, key: str) -> Any:
    if not isinstance(d, dict):
        raise ValueError(f"server job: {key} must be an object, not {d!r}")
    return cls(**_known(cls, d, key + "."))


def study_settings() -> tuple[str, ...]:
    """The fields of ``ServerJob`` read from the top level of the config by name."""
    return tuple(f.name for f in fields(ServerJob) if f.metadata.get("study"))


def engine_runnable(config: dict[str, Any], engine_id: str, hardware: str) -> bool:
    """Whether the engine can run on this machine (``requires_gpu`` engines need a GPU)."""
    return hardware == "gpu" or not config["engines"][engine_id].get("requires_gpu", False)


def reference_condition(config: dict[str, Any], conditions: list[str]) -> str:
    """The condition a server's others are compared with: the study baseline's condition where the server
    measures it, else its first condition."""
    base = (config.get("baseline") or {}).get("condition")
    return base if base in conditions else conditions[0]


def workload_references(config: dict[str, Any], conditions: list[str], reference: str) -> dict[str, str]:
    """For each condition of another workload than ``reference``'s (conditions.X.workload), the condition of its
    own workload it is compared with: the first of that workload the server measures (itself for that one). Two
    conditions of different workloads ask for different requests: their ratio says nothing about the adapters."""
    from .loadgen.traffic import workload_of

    of = {c: workload_of(config["conditions"][c]) for c in conditions}
    firsts: dict[str, str] = {}
    for c in conditions:
        firsts.setdefault(of[c], c)
    return {c: firsts[of[c]] for c in conditions if of[c] != of[reference]}


def server_job(
    config: dict[str, Any],
    server: str,
    hardware: str,
    runtime: bool = False,
    results: str = "results",
    prefix: bool = False,
) -> ServerJob:
    """The job of ``servers.SERVER`` in a checked config (with ``runtime``: its runtime-loading copy, started
    without the runtime adapter and with runtime updates allowed; with ``prefix``: its prefix-caching copy,
    started with the engine's report of cached prompt tokens on); ``results`` is the study's results folder."""
    if server not in config["servers"]:
        raise ConfigError(f"servers.{server}: no such server (known: {sorted(config['servers'])})")
    srv = config["servers"][server]
    eng = config["engines"][srv["engine"]]
    rl = dict(config.get("runtime_load") or {})
    if runtime and not rl:
        raise ConfigError(f"runtime_load: not configured, so server {server!r} has no runtime-loading job")
    adapters = server_adapters(config, server)
    if runtime:
        adapters = [a for a in adapters if a != rl["adapter"]]
    if prefix and not config.get("prefix_cache"):
        raise ConfigError(f"prefix_cache: not configured, so server {server!r} has no prefix-caching job")
    srv = {**srv, "args": {**srv.get("args", {}), **(get_engine(eng["kind"]).cached_tokens_args if prefix else {})}}
    settings = ServerSettings(
        server_id=server + ("-runtime" if runtime else "") + ("-prefix" if prefix else ""),
        engine=eng["kind"],
        served_name=config["model"]["name"],
        runtime_lora=runtime,
        compile_cache=f"{results}/cache/{srv['engine']}" if config["compile_cache"] else "off",
        env={**eng.get("env", {}), **srv.get("env", {})},
        **{k: srv[k] for k in server_settings() if k in srv},
    )
    return ServerJob(
        server=settings,
        engine_id=srv["engine"],
        engine_version=eng["version"],
        adapters=adapters,
        conditions=list(srv["conditions"]),
        reference=(reference := reference_condition(config, list(srv["conditions"]))),
        references=workload_references(config, list(srv["conditions"]), reference),
        bursts=sorted(config["bursts"]),
        shuffle_seed=config["workload"]["seed"],
        hardware=hardware,
        runnable=engine_runnable(config, srv["engine"], hardware),
        **{k: config[k] for k in study_settings()},
    )


def runtime_load_params(config: dict[str, Any]) -> RuntimeLoad:
    """The runtime-loading job's settings (``runtime_load`` less the servers it applies to)."""
    rl = dict(config.get("runtime_load") or {})
    if not rl:
        raise ConfigError("runtime_load: not configured")
    rl.pop("server", None)
    return RuntimeLoad(**rl)


def prefix_cache_params(config: dict[str, Any]) -> PrefixCache:
    """The prefix-caching job's settings (``prefix_cache`` less the servers it applies to)."""
    pc = dict(config.get("prefix_cache") or {})
    if not pc:
        raise ConfigError("prefix_cache: not configured")
    pc.pop("server", None)
    return PrefixCache(**pc)


def input_paths(config: dict[str, Any], server: str, results: str = "results") -> dict[str, Any]:
    """The files a server job reads, under the study's results folder: engine environment, model and adapter
    manifests (every adapter of the server, the runtime one included), the request set."""
    return {
        "env": f"{results}/envs/{config['servers'][server]['engine']}.json",
        "model": f"{results}/model/manifest.json",
        "requests": f"{results}/workload/requests.json",
        "adapters": [f"{results}/adapters/{a}.json" for a in server_adapters(config, server)],
    }


@dataclass(frozen=True)
class JobInputs:
    """A server job's input files, read: the server ready to start, the request set, the adapters built."""

    spec: ServerSpec
    request_set: str  # path of the request-set JSON
    adapter_paths: dict[str, str]  # every adapter the server's manifests list (runtime loads are limited to these)
    engine_version: str  # as the engine's environment reports it


def read_inputs(
    job: ServerJob, env: str | Path, model: str | Path, requests: str | Path, adapters: list[str]
) -> JobInputs:
    """Resolve a job's files (the paths ``input_paths`` names): interpreter, weights and adapter paths."""
    env_info = read_json(env)
    paths = {}
    for f in adapters:
        m = read_json(f)
        verify_manifest_files(m, f"adapter {m['name']}")
        paths[m["name"]] = m["path"]
    missing = sorted(set(job.adapters) - set(paths))
    if missing:
        raise ValueError(f"servers.{job.server_id}.adapters: no manifest given for {missing}")
    settings = {f.name: getattr(job.server, f.name) for f in fields(ServerSettings)}
    settings["env"] = {**env_info.get("env", {}), **job.server.env}
    spec = ServerSpec(
        **settings,
        python=env_info["python"],
        model_path=read_json(model)["path"],
        adapters={a: paths[a] for a in job.adapters},
    )
    return JobInputs(spec, str(requests), paths, env_info.get("version") or "")


def read_inputs_in(job: ServerJob, config: dict[str, Any], server: str, results: str | Path) -> JobInputs:
    """``read_inputs`` for the files of ``server`` under a study's results folder (what the rules would give)."""
    p = input_paths(config, server, str(results))
    return read_inputs(job, p["env"], p["model"], p["requests"], p["adapters"])
