"""Condition roles: which condition of a study answers which of the report's questions, read from the config.

A condition's ``role`` (config schema, ``conditions.NAME.role``) says what it stands for; the report's findings
pick their cells by role, never by a condition's name:

- ``base``: base-model requests only (the reference of every finding);
- ``one-adapter``: every request names the same one adapter (the cost of serving an adapter);
- ``over-slots``: more distinct adapters than the fewest slots (max_loras) of the LoRA servers measuring it (the
  cost of too few slots, measured against the same condition on a server with more slots);
- ``other``: none of these questions.

A condition without a role gets the one its adapters imply (``derived_role``). Where several conditions share a
role, the findings use one: a condition whose role the config sets before one whose role is derived, then the
first by name.
"""

from __future__ import annotations

from typing import Any

ROLES = ("base", "one-adapter", "over-slots", "other")
BASE = "base"  # in a condition's adapter list: the base model (config schema, conditions)


def adapter_set(cond: dict[str, Any]) -> set[str]:
    """The distinct adapters a condition's requests name, the base model left out (a family reference counts its
    members, for a config whose families are not expanded yet)."""
    if "adapters" in cond:
        return {a for a in cond["adapters"] if a != BASE}
    fam = cond.get("family") or {}
    return {f"{fam.get('name')}-{i:03d}" for i in range(int(fam.get("count") or 0))}


def derived_role(config: dict[str, Any], name: str) -> str:
    """The role a condition's adapters imply, for one whose config sets none."""
    cond = config["conditions"][name]
    used = adapter_set(cond)
    with_base = BASE in (cond.get("adapters") or [])
    if not used:
        return "base"
    if len(used) == 1 and not with_base:
        return "one-adapter"
    slots = [
        int(s["max_loras"])
        for s in (config.get("servers") or {}).values()
        if s.get("lora") and s.get("max_loras") and name in s.get("conditions", [])
    ]
    if slots and len(used) > min(slots):
        return "over-slots"
    return "other"


def condition_roles(config: dict[str, Any]) -> dict[str, str]:
    """Every condition's role: the config's where it sets one, else the derived one; a condition of another
    workload than the study's own takes none (``other``) unless the config gives it one, so that the findings
    never set a condition of one workload against another's."""
    return {
        name: cond.get("role") or ("other" if cond.get("workload") else derived_role(config, name))
        for name, cond in config["conditions"].items()
    }


def role_conditions(config: dict[str, Any]) -> dict[str, str]:
    """The one condition the findings use for each role that some condition has (``other`` left out)."""
    roles = condition_roles(config)
    order = sorted(roles, key=lambda n: ("role" not in config["conditions"][n], n))
    out: dict[str, str] = {}
    for name in order:
        if roles[name] != "other":
            out.setdefault(roles[name], name)
    return out
