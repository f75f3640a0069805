"""Co-resident server groups (``groups:`` in the config): the checks made when the workflow reads the config, before
any job runs, and the helpers the rules plan with.

A group is several servers of one study started together by one job (``group_loadtest``: lorabench.group), measured
in cycles that hold one burst of every cell of every member, so that a comparison between two of its servers is
paired per cycle as a comparison within one server is. Refused here, each error naming the key:

- a server in two groups, a server the config does not declare, a group of fewer than two servers;
- a group mixing an engine that requires a GPU and one that does not (one of them would not run on any machine);
- on GPU engines, a group whose memory does not fit one device (``plan_memory``): each server's share of the GPU must
  be given explicitly (vLLM ``args.gpu_memory_utilization``, a share of the whole GPU each; SGLang
  ``args.mem_fraction_static``, which counts the memory other processes already hold, so cumulative in the order the
  group starts its servers: shared/evidence/h200-measurement-design run 4) and all of them must fit in 1.0;
- ``server_starts`` above 1 (a group's servers start once, together: pairs never span two starts).

Kept apart from ``config`` (as ``engine_limits`` is) so that the rules importing the config module do not rerun when
these checks change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import ConfigError

# How each GPU engine takes its share of the device's memory: the server flag (an ``args`` key) and whether it counts
# only the server's own memory ("own") or every process's on the device ("cumulative").
MEMORY_ARGS: dict[str, tuple[str, str]] = {
    "vllm": ("gpu_memory_utilization", "own"),
    "sglang": ("mem_fraction_static", "cumulative"),
}


def groups_of(config: dict[str, Any]) -> dict[str, list[str]]:
    """Each group's servers, in the order the group starts them."""
    return {gid: list(g.get("servers") or []) for gid, g in (config.get("groups") or {}).items()}


def group_of(config: dict[str, Any], server: str) -> str | None:
    """The group a server belongs to (None: it runs in a job of its own)."""
    return next((gid for gid, members in groups_of(config).items() if server in members), None)


def grouped_servers(config: dict[str, Any]) -> list[str]:
    return sorted(s for members in groups_of(config).values() for s in members)


def solo_servers(config: dict[str, Any]) -> list[str]:
    """The servers measured by a server_loadtest job of their own (in no group)."""
    grouped = set(grouped_servers(config))
    return sorted(s for s in config["servers"] if s not in grouped)


@dataclass(frozen=True)
class MemoryShare:
    """One server's share of the GPU in a group's plan: what it asks for (its flag's value) and what it holds."""

    server: str
    flag: str  # servers.ID.args.FLAG
    asked: float  # the flag's value
    own: float  # the share it holds itself (a cumulative flag less what the servers before it hold)
    held_after: float  # every share held once it is up


def plan_memory(config: dict[str, Any], gid: str) -> list[MemoryShare]:
    """The GPU memory plan of a group of GPU engines, in start order, or a ConfigError naming the servers and the
    numbers: a server without an explicit share, a cumulative share not above what its predecessors hold, or shares
    that add up to more than the whole device. The estimate is the engines' own: each flag bounds what the server
    takes for weights, KV cache, graphs and adapter slots together."""
    shares: list[MemoryShare] = []
    held = 0.0
    for sid in groups_of(config)[gid]:
        srv = config["servers"][sid]
        kind = config["engines"][srv["engine"]]["kind"]
        if kind not in MEMORY_ARGS:
            raise ConfigError(
                f"groups.{gid}: server {sid} runs engine kind {kind!r}, for which no GPU memory split is known "
                f"(known: {', '.join(sorted(MEMORY_ARGS))}); it cannot share a GPU in a group"
            )
        flag, how = MEMORY_ARGS[kind]
        value = (srv.get("args") or {}).get(flag)
        key = f"servers.{sid}.args.{flag}"
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 1:
            raise ConfigError(
                f"groups.{gid}: {key} must be given, a fraction in (0, 1], for a server sharing a GPU in a group "
                f"(got {value!r}); its default assumes the GPU to itself"
            )
        own = float(value) if how == "own" else float(value) - held
        if own <= 0:
            raise ConfigError(
                f"groups.{gid}: {key} = {value} counts the memory held by the servers started before it "
                f"({', '.join(s.server for s in shares)}: {held:.2f} of the GPU), so it must be above {held:.2f}"
            )
        held += own
        shares.append(MemoryShare(sid, flag, float(value), own, held))
    if held > 1.0 + 1e-9:
        parts = ", ".join(f"{s.server} {s.own:.2f} ({s.flag} {s.asked:g})" for s in shares)
        raise ConfigError(
            f"groups.{gid}: the servers' GPU memory shares add up to {held:.2f} of the GPU, above 1.0: {parts}"
        )
    return shares


def memory_shares(config: dict[str, Any], gid: str) -> dict[str, float]:
    """Each member's own share of the GPU (``plan_memory``) for a group of GPU engines; {} for a CPU group."""
    members = groups_of(config)[gid]
    if not all(config["engines"][config["servers"][s]["engine"]].get("requires_gpu") for s in members):
        return {}
    return {m.server: round(m.own, 6) for m in plan_memory(config, gid)}


def check_groups(config: dict[str, Any]) -> None:
    """Every check of the module's docstring, before anything starts."""
    groups = groups_of(config)
    if not groups:
        return
    seen: dict[str, str] = {}
    for gid, members in groups.items():
        if len(members) < 2:
            raise ConfigError(f"groups.{gid}.servers: a group needs at least two servers, got {members}")
        for sid in members:
            if sid not in config["servers"]:
                raise ConfigError(f"groups.{gid}.servers: no such server {sid!r} (known: {sorted(config['servers'])})")
            if sid in seen:
                where = f"twice in groups.{gid}" if seen[sid] == gid else f"in groups.{seen[sid]} and groups.{gid}"
                raise ConfigError(f"groups.{gid}.servers: server {sid} is {where}; a server belongs to one group")
            seen[sid] = gid
        engines = {sid: config["servers"][sid]["engine"] for sid in members}
        gpu = {sid: bool(config["engines"][e].get("requires_gpu")) for sid, e in engines.items()}
        if len(set(gpu.values())) > 1:
            on = ", ".join(f"{s} ({engines[s]})" for s in members if gpu[s])
            off = ", ".join(f"{s} ({engines[s]})" for s in members if not gpu[s])
            raise ConfigError(
                f"groups.{gid}: mixes engines that require a GPU ({on}) with engines that do not ({off}); "
                "a group's servers share one device"
            )
        if all(gpu.values()):
            plan_memory(config, gid)
    if int(config.get("server_starts") or 1) > 1:
        raise ConfigError(
            f"server_starts: {config['server_starts']} with groups ({', '.join(sorted(groups))}): a group's servers "
            "start once, together, so that its pairs share one start; set server_starts: 1"
        )
