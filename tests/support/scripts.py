"""The scripts under benchmarks/ are not a package: tests load them by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]  # not conftest's: importing it here pulls the test modules into mypy


def benchmark(name: str) -> ModuleType:
    """benchmarks/NAME.py as a module (registered in sys.modules, so that its dataclasses resolve their types)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
