"""Study configuration: schema validation (with defaults) and the cross-references a schema cannot express.

Errors name the offending key (``servers.lora-2.engine``) so a user can fix the file without reading code.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """A study configuration that cannot run; the message names the key."""


@dataclass(frozen=True)
class MovedKey:
    """A key the schema once had: the keys that took its place (none where nothing did) and why it went."""

    replaced_by: tuple[str, ...]
    why: str

    def note(self) -> str:
        if self.replaced_by:
            return f"replaced by {', '.join(self.replaced_by)}: {self.why}"
        return f"removed: {self.why}"


# Keys removed from or renamed in workflow/schemas/config.schema.yaml, by dotted path (ID or NAME stands for any
# entry of a map, as in config/README.md): a config written for an earlier version stops with an unknown key and
# is told what replaced it. config/README.md lists them (tools/config_reference.py). When a key leaves the schema,
# its row comes here (the three below went with method v2, commit 6cc2e1c; docs/methodology.md).
MOVED_KEYS: dict[str, MovedKey] = {
    "bursts_per_measurement": MovedKey(
        ("repetitions", "max_repetitions"),
        "method v2 measures one burst of each cell per cycle and repeats cycles, not bursts within a measurement",
    ),
    "max_bursts_per_measurement": MovedKey(
        ("max_repetitions", "max_measuring_s"),
        "method v2 bounds the cycles of a server job and the seconds its bursts take",
    ),
    "min_measurement_s": MovedKey(
        ("target_points", "target_ci_pct"),
        "method v2 measures until an interval is narrow enough, not for a minimum time (up to max_repetitions "
        "cycles and max_measuring_s seconds)",
    ),
}


def moved_key(path: str) -> MovedKey | None:
    """The entry of ``MOVED_KEYS`` for a key's dotted path in a config (``servers.lora-2.x`` matches
    ``servers.ID.x``), or None."""
    parts = path.split(".")
    for pattern, moved in MOVED_KEYS.items():
        want = pattern.split(".")
        if len(want) == len(parts) and all(w in ("ID", "NAME") or w == p for w, p in zip(want, parts, strict=True)):
            return moved
    return None


def _path_of(err: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "(top level)"


def _fill_defaults(validator_cls: type[Any]) -> type[Any]:
    validate_props = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Any:
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if "default" in sub and prop not in instance:
                    instance[prop] = json.loads(json.dumps(sub["default"]))
        yield from validate_props(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_cls, {"properties": set_defaults})


_YAML_BOOL_HINT = "YAML 1.1 reads unquoted on/off/yes/no/true/false as booleans"


def _bool_keys(node: Any, where: str = "") -> list[str]:
    """Places where a mapping key became a boolean (``off:`` is False): the schema would only say it is no name."""
    found: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, bool):
                spelled = "off, no or false" if k is False else "on, yes or true"
                found.append(
                    f"{where or '(top level)'}: a key written {spelled} was read as the boolean {k} "
                    f"({_YAML_BOOL_HINT}): quote it, e.g. '{'off' if k is False else 'on'}':"
                )
            found += _bool_keys(v, f"{where}.{k}" if where else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _bool_keys(v, f"{where}[{i}]")
    return found


@functools.cache
def _schema() -> dict[str, Any]:
    return dict(yaml.safe_load(SCHEMA.read_text()))


def schema_default(key: str) -> Any:
    """The default of a top-level config key, as the schema gives it (the one place defaults are written)."""
    props = _schema()["properties"]
    if key not in props or "default" not in props[key]:
        raise KeyError(f"{SCHEMA.name}: top-level key {key!r} has no default")
    return copy.deepcopy(props[key]["default"])


def validate_schema(config: dict[str, Any]) -> None:
    """Check types and keys against the schema and fill defaults in place."""
    bool_keys = _bool_keys(config)
    if bool_keys:
        raise ConfigError("invalid config:\n  " + "\n  ".join(bool_keys))
    schema = _schema()
    validator = _fill_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = []
        for e in errors[:10]:
            if e.validator == "additionalProperties":
                extra = sorted(set(e.instance) - set(e.schema.get("properties", {})))
                where = _path_of(e)
                paths = [f"{where}.{k}" if where != "(top level)" else k for k in extra]
                plain = [p for p in paths if not moved_key(p)]
                if plain:
                    lines.append(f"unknown key(s): {', '.join(plain)}")
                lines += [f"unknown key(s): {p} ({moved.note()})" for p in paths if (moved := moved_key(p))]
            elif isinstance(e.instance, bool) and e.validator in ("enum", "type", "pattern"):
                lines.append(
                    f"{_path_of(e)}: {e.message}; {_YAML_BOOL_HINT}: quote the value (e.g. 'off') if a name was meant"
                )
            else:
                lines.append(f"{_path_of(e)}: {e.message}")
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines))


def check_references(config: dict[str, Any]) -> None:
    """Cross-references: every name a key points to must exist."""
    from .engines.base import lora_settings

    model = config["model"]
    if bool(model.get("architecture")) == bool(model.get("path")):
        raise ConfigError("model: give exactly one of 'architecture' (synthetic weights) or 'path' (real weights)")
    adapters = set(config["adapters"])
    for cname, cond in config["conditions"].items():
        for a in cond["adapters"]:
            if a != "base" and a not in adapters:
                raise ConfigError(f"conditions.{cname}.adapters: unknown adapter {a!r} (known: {sorted(adapters)})")
    for sid, srv in config["servers"].items():
        if srv["engine"] not in config["engines"]:
            raise ConfigError(
                f"servers.{sid}.engine: unknown engine {srv['engine']!r} (known: {sorted(config['engines'])})"
            )
        for c in srv["conditions"]:
            if c not in config["conditions"]:
                raise ConfigError(f"servers.{sid}.conditions: unknown condition {c!r}")
            uses = {a for a in config["conditions"][c]["adapters"] if a != "base"}
            if uses and not srv["lora"]:
                raise ConfigError(f"servers.{sid}.conditions: {c!r} uses adapters but lora is false")
            missing = uses - set(server_adapters(config, sid))
            if missing:
                raise ConfigError(f"servers.{sid}.conditions: {c!r} uses adapters not loaded: {sorted(missing)}")
        for a in srv.get("adapters", []):
            if a not in adapters:
                raise ConfigError(f"servers.{sid}.adapters: unknown adapter {a!r}")
        if not srv["lora"]:
            for key in (*lora_settings(), "adapters"):
                if key in srv:
                    raise ConfigError(f"servers.{sid}.{key}: only meaningful with lora: true")
    from .engines import registered_engines

    for eid, eng in config["engines"].items():
        if eng["kind"] not in registered_engines():
            raise ConfigError(
                f"engines.{eid}.kind: unknown engine kind {eng['kind']!r} (registered: {registered_engines()})"
            )
        if not eng.get("requirements") and not eng.get("existing"):
            raise ConfigError(f"engines.{eid}: give 'requirements' (pinned venv) or 'existing' (installed python)")
        if eng.get("requirements") and not Path(eng["requirements"]).exists():
            raise ConfigError(f"engines.{eid}.requirements: file {eng['requirements']} not found")
    base = config.get("baseline")
    if base:
        if base["server"] not in config["servers"]:
            raise ConfigError(f"baseline.server: unknown server {base['server']!r}")
        if base["condition"] not in config["servers"][base["server"]]["conditions"]:
            raise ConfigError(f"baseline.condition: {base['condition']!r} is not measured on {base['server']!r}")
    rl = config.get("runtime_load")
    if rl:
        for sid in runtime_load_servers(config):
            if sid not in config["servers"]:
                raise ConfigError(f"runtime_load.server: unknown server {sid!r}")
            if not config["servers"][sid]["lora"]:
                raise ConfigError(f"runtime_load.server: {sid!r} has lora: false")
        if rl["adapter"] not in adapters:
            raise ConfigError(f"runtime_load.adapter: unknown adapter {rl['adapter']!r}")
    for sid in prefix_cache_servers(config):
        if sid not in config["servers"]:
            raise ConfigError(f"prefix_cache.server: unknown server {sid!r}")
        if not config["servers"][sid]["lora"] or not server_adapters(config, sid):
            raise ConfigError(f"prefix_cache.server: {sid!r} serves no adapter (it needs lora: true and adapters)")
    check_rate_sweep(config)
    if model.get("architecture") and not Path(model["architecture"]).exists():
        raise ConfigError(f"model.architecture: file {model['architecture']} not found")
    if not Path(config["claims"]).exists():
        raise ConfigError(f"claims: file {config['claims']} not found")


def _serves(config: dict[str, Any], server_id: str, condition: str) -> bool:
    """Whether a server can serve a condition: every adapter it uses is loaded (LoRA on where it uses any)."""
    uses = {a for a in config["conditions"][condition]["adapters"] if a != "base"}
    return not uses or (bool(config["servers"][server_id]["lora"]) and uses <= set(server_adapters(config, server_id)))


def rate_sweep_mixes(config: dict[str, Any]) -> dict[str, list[str]]:
    """``rate_sweep``: the mixes each listed server sweeps (those of ``rate_sweep.mixes`` it can serve; with
    ``base_on_lora: false``, a mix of the base model alone only on servers with LoRA off), by server; empty without a
    ``rate_sweep`` section."""
    rs = config.get("rate_sweep")
    if not rs:
        return {}

    def sweeps(sid: str, mix: str) -> bool:
        base_only = not [a for a in config["conditions"][mix]["adapters"] if a != "base"]
        if base_only and config["servers"][sid]["lora"] and not rs.get("base_on_lora", True):
            return False
        return _serves(config, sid, mix)

    return {sid: [m for m in rs["mixes"] if sweeps(sid, m)] for sid in rs["servers"]}


def check_rate_sweep(config: dict[str, Any]) -> None:
    """``rate_sweep``: its servers and mixes exist; each mix is served by one listed server at least, and each
    server serves one listed mix at least (a mix is swept on every listed server that can serve it)."""
    rs = config.get("rate_sweep")
    if not rs:
        return
    for sid in rs["servers"]:
        if sid not in config["servers"]:
            raise ConfigError(f"rate_sweep.servers: unknown server {sid!r} (known: {sorted(config['servers'])})")
    for mix in rs["mixes"]:
        if mix not in config["conditions"]:
            raise ConfigError(f"rate_sweep.mixes: unknown condition {mix!r} (known: {sorted(config['conditions'])})")
    by_server = rate_sweep_mixes(config)
    for sid, mixes in by_server.items():
        if not mixes:
            lean = config["servers"][sid]["lora"] and not rs.get("base_on_lora", True)
            raise ConfigError(
                f"rate_sweep.servers: {sid!r} can serve none of rate_sweep.mixes (its adapters: "
                f"{server_adapters(config, sid) or 'none, lora is false'}{'; base_on_lora is false' if lean else ''})"
            )
    for mix in rs["mixes"]:
        if not any(mix in mixes for mixes in by_server.values()):
            raise ConfigError(f"rate_sweep.mixes: no server of rate_sweep.servers can serve {mix!r} (its adapters)")


def family_member(family: str, i: int) -> str:
    return f"{family}-{i:03d}"


def _family_folders(fname: str, fam: dict[str, Any]) -> list[str]:
    """The members of a family of adapters given by path: the folders inside ``path`` by name (hidden ones left
    out), the first ``count`` where given. What they hold is checked with the other adapters given by path
    (lorabench.adapter_paths)."""
    root = Path(fam["path"])
    if not root.is_dir():
        raise ConfigError(
            f"adapter_families.{fname}.path: {root} is not a folder (a relative path is taken from the study's "
            "working directory)"
        )
    found = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not found:
        raise ConfigError(f"adapter_families.{fname}.path: {root} holds no adapter folder")
    count = fam.get("count") or len(found)
    if count > len(found):
        raise ConfigError(
            f"adapter_families.{fname}.count: {count} is more than the {len(found)} adapter folders in {root}"
        )
    return [str(p) for p in found[:count]]


def expand_families(config: dict[str, Any]) -> None:
    """Adapter families into plain adapters, and conditions naming a family into adapter lists, in place (so
    every later reader sees ordinary adapters). Running it again on its own result changes nothing."""
    adapters = config["adapters"]
    families = config.get("adapter_families") or {}
    for fname, fam in families.items():
        if fam.get("path"):
            folders = _family_folders(fname, fam)
            for i, folder in enumerate(folders):
                name = family_member(fname, i)
                if name in adapters and adapters[name] != {"path": folder}:
                    raise ConfigError(f"adapter_families.{fname}: member {name!r} clashes with adapters.{name}")
                adapters[name] = {"path": folder}
            fam["count"] = len(folders)  # what conditions' family.count is checked against
            continue
        for i in range(fam["count"]):
            name = family_member(fname, i)
            spec = {
                "rank": fam["rank"],
                "alpha": fam["alpha"],
                "target_modules": list(fam["target_modules"]),
                "init_lora_b_std": fam["init_lora_b_std"],
                "seed": fam["seed_base"] + i,
            }
            if name in adapters and adapters[name] != spec:
                raise ConfigError(f"adapter_families.{fname}: member {name!r} clashes with adapters.{name}")
            adapters[name] = spec
    for cname, cond in config["conditions"].items():
        fam_ref = cond.get("family")
        if not fam_ref:
            continue
        fname = fam_ref["name"]
        if fname not in families:
            raise ConfigError(
                f"conditions.{cname}.family.name: unknown adapter family {fname!r} (known: {sorted(families)})"
            )
        if fam_ref["count"] > families[fname]["count"]:
            raise ConfigError(
                f"conditions.{cname}.family.count: {fam_ref['count']} is more than adapter_families.{fname}.count "
                f"({families[fname]['count']})"
            )
        members = [family_member(fname, i) for i in range(fam_ref["count"])]
        if "adapters" in cond and cond["adapters"] != members:
            raise ConfigError(f"conditions.{cname}: give either adapters or family, not both")
        cond["adapters"] = members
    if not adapters:
        raise ConfigError("adapters: none declared (give adapters or adapter_families)")


def check_existing_pythons(config: dict[str, Any], hardware: str | None = None) -> None:
    """Every ``engines.ID.existing.python`` names an executable: a path (relative to the working directory) or a
    command on PATH. An engine that needs a GPU is not checked on a machine without one: it is reported as not run
    there, so a site's installation may be named before that machine is at hand."""
    for eid, eng in config["engines"].items():
        python = (eng.get("existing") or {}).get("python")
        if not python:
            continue
        if eng.get("requires_gpu"):
            hardware = hardware or detect_hardware()
            if hardware != "gpu":
                continue
        key = f"engines.{eid}.existing.python"
        if "/" not in python:
            if not shutil.which(python):
                raise ConfigError(f"{key}: {python!r} is not a command on PATH")
            continue
        path = Path(python)
        if not path.exists():
            raise ConfigError(f"{key}: {python} does not exist")
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ConfigError(f"{key}: {python} is not an executable file")


def load_and_check(config: dict[str, Any]) -> dict[str, Any]:
    from .loadgen.traffic import WorkloadError, check_workloads

    validate_schema(config)
    expand_families(config)
    check_references(config)
    try:
        check_workloads(config)
    except WorkloadError as e:
        raise ConfigError(str(e)) from None
    check_existing_pythons(config)
    return config


def load_file(path: str | Path) -> dict[str, Any]:
    with open(path) as f:
        return load_and_check(yaml.safe_load(f))


def runtime_load_servers(config: dict[str, Any]) -> list[str]:
    """The servers a runtime-loading job is made for (``runtime_load.server``: one id or a list)."""
    rl = config.get("runtime_load")
    if not rl:
        return []
    return [rl["server"]] if isinstance(rl["server"], str) else list(rl["server"])


def prefix_cache_servers(config: dict[str, Any]) -> list[str]:
    """The servers a prefix-caching job is made for (``prefix_cache.server``: one id or a list)."""
    pc = config.get("prefix_cache")
    if not pc:
        return []
    return [pc["server"]] if isinstance(pc["server"], str) else list(pc["server"])


def server_adapters(config: dict[str, Any], server_id: str) -> list[str]:
    srv = config["servers"][server_id]
    if not srv["lora"]:
        return []
    return sorted(srv.get("adapters") or config["adapters"])


def detect_hardware() -> str:
    """'gpu' where nvidia-smi lists a GPU, else 'cpu'."""
    if not shutil.which("nvidia-smi"):
        return "cpu"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    return "gpu" if "GPU" in out else "cpu"


def stable_hash(obj: Any, n: int = 10) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:n]
