"""Engines behind one small interface, registered by name (``get_engine('vllm')``).

Adding an engine means adding one module to this package that subclasses
:class:`~lorabench.engines.base.Engine` and decorates it with :func:`~lorabench.engines.base.register`: every
module here is imported below, so the registry (and the config's ``kind`` check) knows it without other edits.
"""

import importlib
import pkgutil

from .base import (
    Engine,
    ServerSettings,
    ServerSpec,
    all_polling_threads,
    all_server_markers,
    get_engine,
    registered_engines,
)

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")

__all__ = [
    "Engine",
    "ServerSettings",
    "ServerSpec",
    "all_polling_threads",
    "all_server_markers",
    "get_engine",
    "registered_engines",
]
