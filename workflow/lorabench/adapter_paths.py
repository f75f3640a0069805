"""The config's side of adapters given by path: which adapters they are, which servers load them, and their check
when the workflow reads the config (before any job runs), against the model as its architecture config names it.

Kept apart from ``own_adapters`` (the adapter's job) so that the job's code inputs do not include the config
module, and apart from ``config`` so that the rules importing it do not rerun when these checks change.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .config import ConfigError
from .own_adapters import CONFIG_FILE, AdapterError, ModelLayers, check_adapter, max_ranks_of, read_folder


def adapter_key(config: dict[str, Any], name: str) -> str:
    """Where adapter ``name`` is declared: ``adapters.NAME``, or its family's key for a member of a family."""
    for fname, fam in (config.get("adapter_families") or {}).items():
        if fam.get("path") and re.fullmatch(rf"{re.escape(fname)}-\d{{3,}}", name):
            return f"adapter_families.{fname} (member {name})"
    return f"adapters.{name}"


def path_adapters(config: dict[str, Any]) -> dict[str, str]:
    """Adapter name -> folder, for the adapters given by path (families expanded)."""
    return {n: str(a["path"]) for n, a in config["adapters"].items() if a.get("path")}


def source_files(config: dict[str, Any], name: str) -> list[str]:
    """The files of adapter ``name``'s folder that its job copies (its config and weights): the job's inputs,
    so that an edited adapter is imported again, and what it serves measured again."""
    folder = Path(config["adapters"][name]["path"])
    found = read_folder(adapter_key(config, name), folder)
    return [str(folder / CONFIG_FILE), str(found.weights)]


def model_layers_of_config(config: dict[str, Any]) -> ModelLayers | None:
    """The model's layers as its architecture config names them (model.architecture, or model.path's
    config.json) where the model type is a known one; None otherwise (the adapter's job checks them)."""
    model = config["model"]
    src = Path(model["architecture"]) if model.get("architecture") else Path(model["path"]) / "config.json"
    try:
        cfg = json.loads(src.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return ModelLayers.from_config(cfg, model["name"], model.get("dtype") if model.get("architecture") else None)


def check_adapter_folders(config: dict[str, Any]) -> None:
    """Every adapter given by path, checked before any job runs: its folder, adapter_config.json and weights
    file, its rank against the max_lora_rank of each server loading it and, for a model of a known type, its
    targets and layer shapes against the model's. Raises ConfigError naming each adapter's key and folder."""
    paths = path_adapters(config)
    if not paths:
        return
    model = model_layers_of_config(config)
    problems = []
    for name, path in sorted(paths.items()):
        try:
            check_adapter(read_folder(adapter_key(config, name), path), model, max_ranks_of(config, name))
        except AdapterError as e:
            problems.append(str(e))
    if problems:
        raise ConfigError("adapters given by path that cannot be served:\n  " + "\n  ".join(problems))
