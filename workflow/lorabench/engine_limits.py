"""What an engine or PEFT would refuse at start, checked when the workflow reads the config (before any job runs) and
by ``lorabench check-config``: a GPU hour is not lost to a server that stops in its first minute.

- a host adapter cache smaller than a batch's adapters (vLLM: ``max_cpu_loras`` below ``max_loras``), or one given
  to an engine that has none (SGLang);
- a synthetic adapter whose rank is above the ``max_lora_rank`` of a LoRA server serving it, the engine's default
  where the server sets none (vLLM: 16); on an engine that sizes its adapters' memory from the adapters loaded at
  start (SGLang, ``max_lora_rank`` unset), an adapter loaded at run time of a larger rank than those;
- an adapter given by path above an engine's default ``max_lora_rank`` where the server sets none (those above a
  ``max_lora_rank`` the server sets are refused by ``adapter_paths.check_adapter_folders``);
- a synthetic adapter's target module the model does not have (PEFT refuses an adapter none of whose targets it
  finds and leaves the others out without a word), for a model whose layers its architecture config names.

What the config checks itself (``config.load_and_check``) stays there: an ``existing.python`` that is missing for an
engine this machine runs, and a prompt plus output longer than a server's context (``loadgen.traffic``).

Kept apart from ``config`` (as ``adapter_paths`` is) so that the rules importing the config module do not rerun when
these checks change.
"""

from __future__ import annotations

from typing import Any

from .adapter_paths import adapter_key, model_layers_of_config, path_adapters
from .config import ConfigError, family_member, runtime_load_servers, server_adapters
from .engines import get_engine
from .own_adapters import AdapterError, ModelLayers, check_adapter, read_folder


def _declared(config: dict[str, Any], name: str) -> tuple[str, list[str]]:
    """Where a synthetic adapter's settings are written: ``adapters.NAME``, or ``adapter_families.F`` with the
    members it stands for (every member of a synthetic family has the family's rank and targets)."""
    for fname, fam in (config.get("adapter_families") or {}).items():
        if fam.get("path"):
            continue
        members = [family_member(fname, i) for i in range(fam["count"])]
        if name in members:
            return f"adapter_families.{fname}", members
    return f"adapters.{name}", [name]


def _grouped(config: dict[str, Any], names: list[str]) -> dict[str, list[str]]:
    """Adapter names by the key that declares them, in the order first met."""
    out: dict[str, list[str]] = {}
    for n in names:
        out.setdefault(_declared(config, n)[0], []).append(n)
    return out


def _members(names: list[str]) -> str:
    return f" (members {names[0]} .. {names[-1]})" if len(names) > 1 else f" (member {names[0]})"


def _cache_problems(sid: str, srv: dict[str, Any], kind: str) -> list[str]:
    engine = get_engine(kind)
    cpu = srv.get("max_cpu_loras")
    if cpu is None:
        return []
    if not engine.has_cpu_adapter_cache:
        return [
            f"servers.{sid}.max_cpu_loras: {kind} has no host adapter cache of its own size (max_cpu_loras is a "
            "vLLM setting): leave it out"
        ]
    slots = srv.get("max_loras") or engine.default_max_loras
    if slots is None or cpu >= slots:
        return []
    of = f"servers.{sid}.max_loras ({slots})" if srv.get("max_loras") else f"{kind}'s default max_loras ({slots})"
    return [
        f"servers.{sid}.max_cpu_loras: {cpu} is less than {of}: {kind} refuses to start (its host cache must hold "
        f"every adapter of a batch). Raise max_cpu_loras to {slots} or more, or leave it out (it then equals "
        "max_loras)"
    ]


def _rank_problems(config: dict[str, Any], sid: str, srv: dict[str, Any], kind: str) -> list[str]:
    engine = get_engine(kind)
    served = server_adapters(config, sid)
    synthetic = [n for n in served if "rank" in config["adapters"][n]]
    given = srv.get("max_lora_rank")
    limit = given or engine.default_max_lora_rank
    problems = []
    if limit is not None:
        where = (
            f"servers.{sid}.max_lora_rank ({limit})"
            if given
            else f"{kind}'s default max_lora_rank ({limit}; servers.{sid}.max_lora_rank is not set)"
        )
        for key, names in _grouped(config, [n for n in synthetic if config["adapters"][n]["rank"] > limit]).items():
            rank = config["adapters"][names[0]]["rank"]
            of = _members(names) if key.startswith("adapter_families.") else ""
            leave = "those members" if of else "the adapter"
            problems.append(
                f"{key}.rank: {rank}{of} is above {where}, and servers.{sid} serves it: {kind} refuses the adapter. "
                f"Raise servers.{sid}.max_lora_rank to {rank} or more, or leave {leave} out of servers.{sid}.adapters"
            )
        if not given:
            problems += _path_rank_problems(config, sid, served, kind, limit)
    elif not given and sid in runtime_load_servers(config):
        problems += _runtime_rank_problems(config, sid, served, kind)
    return problems


def _path_rank_problems(config: dict[str, Any], sid: str, served: list[str], kind: str, limit: int) -> list[str]:
    """Adapters given by path against the engine's default max_lora_rank (their folders' own problems are reported
    by adapter_paths.check_adapter_folders)."""
    problems = []
    paths = path_adapters(config)
    for name in served:
        if name not in paths:
            continue
        try:
            check_adapter(read_folder(adapter_key(config, name), paths[name]), None, {sid: limit})
        except AdapterError as e:
            if "max_lora_rank" in str(e):
                problems.append(f"{e} (not set: {kind}'s default is {limit})")
    return problems


def _runtime_rank_problems(config: dict[str, Any], sid: str, served: list[str], kind: str) -> list[str]:
    """An engine that sizes its adapter memory from the adapters loaded at start: the runtime-loading copy of the
    server starts without runtime_load.adapter, which then may not be of a larger rank (synthetic adapters)."""
    loaded = config["runtime_load"]["adapter"]
    spec = config["adapters"].get(loaded) or {}
    start = [config["adapters"][n] for n in served if n != loaded]
    if "rank" not in spec or not start or any("rank" not in a for a in start):
        return []
    largest = max(a["rank"] for a in start)
    if spec["rank"] <= largest:
        return []
    return [
        f"{_declared(config, loaded)[0]}.rank: {spec['rank']} (runtime_load.adapter {loaded}) is above the largest "
        f"rank of the adapters servers.{sid} loads at start ({largest}), which {kind} takes as its max_lora_rank "
        f"where servers.{sid}.max_lora_rank is not set: {kind} refuses the adapter at run time. Set "
        f"servers.{sid}.max_lora_rank to {spec['rank']} or more"
    ]


def _target_problems(config: dict[str, Any], model: ModelLayers) -> list[str]:
    leaves = set(model.leaves())
    problems = []
    synthetic = [n for n, a in config["adapters"].items() if "rank" in a]
    for key, names in _grouped(config, synthetic).items():
        targets = config["adapters"][names[0]]["target_modules"]
        missing = [t for t in targets if t not in leaves]
        if missing:
            problems.append(
                f"{key}.target_modules: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not a layer of "
                f"the model {model.describe()}, whose layers are {', '.join(model.leaves())}: PEFT refuses an "
                "adapter none of whose targets the model has, and leaves the others out"
            )
    return problems


def engine_limit_problems(config: dict[str, Any]) -> list[str]:
    """Every problem of a checked config (``config.load_and_check``) that an engine or PEFT would refuse at start,
    each naming its key and the numbers."""
    problems = []
    for sid, srv in sorted(config["servers"].items()):
        if not srv["lora"]:
            continue
        kind = config["engines"][srv["engine"]]["kind"]
        problems += _cache_problems(sid, srv, kind)
        problems += _rank_problems(config, sid, srv, kind)
    model = model_layers_of_config(config)
    if model is not None:
        problems += _target_problems(config, model)
    return problems


def check_engine_limits(config: dict[str, Any]) -> None:
    """Raise ConfigError listing what an engine or PEFT would refuse at start (``engine_limit_problems``)."""
    problems = engine_limit_problems(config)
    if problems:
        raise ConfigError("what an engine would refuse at start:\n  " + "\n  ".join(problems))
