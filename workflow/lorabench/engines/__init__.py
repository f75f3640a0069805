"""Engines behind one small interface, registered by name (``get_engine('vllm')``).

Adding an engine means adding one module that subclasses :class:`~lorabench.engines.base.Engine` and decorates
it with :func:`~lorabench.engines.base.register`, and importing it here.
"""

from . import sglang as _sglang  # noqa: F401  (registers "sglang")
from . import vllm as _vllm  # noqa: F401  (registers "vllm")
from .base import Engine, ServerSpec, all_server_markers, get_engine, registered_engines

__all__ = ["Engine", "ServerSpec", "all_server_markers", "get_engine", "registered_engines"]
