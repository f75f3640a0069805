"""Every check a run makes of a loaded config before any job, in one place: the workflow (rules/common.smk) and
``lorabench check-config`` both call ``check_before_jobs``, so the command says OK only to what a run accepts. Each
check raises ``config.ConfigError`` naming the key. Kept apart from ``config`` (as the checks' own modules are) so
that the measuring jobs do not rerun when a check changes."""

from __future__ import annotations

from typing import Any

from .adapter_paths import check_adapter_folders
from .engine_limits import check_engine_limits
from .groups import check_groups


def check_before_jobs(config: dict[str, Any]) -> None:
    """The checks beyond the schema's (``config.load_and_check``): the adapter folders a config names, what an
    engine would refuse at start, and the co-resident groups."""
    check_adapter_folders(config)
    check_engine_limits(config)
    check_groups(config)
