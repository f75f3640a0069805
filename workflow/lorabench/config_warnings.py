"""What a valid config will not deliver, said before a run (``lorabench check-config``): settings that run but give
weaker answers than their user may expect. Warnings, not errors: the run goes on. Kept apart from ``config`` (as
``engine_limits`` is) so that the measuring jobs do not rerun when these change."""

from __future__ import annotations

from typing import Any

from .stats import MIN_PAIRED


def config_warnings(config: dict[str, Any]) -> list[str]:
    """Each warning names the key: cycles too few for any comparison to be paired (``stats.MIN_PAIRED``), or so
    few at the minimum that a time cap reached first leaves them unpaired."""
    out = []
    reps, most = int(config.get("repetitions") or 0), int(config.get("max_repetitions") or 0)
    if most and most < MIN_PAIRED:
        out.append(f"max_repetitions: {most} cycles at most, fewer than the {MIN_PAIRED} a paired interval needs: "
                   "every comparison will be unpaired (the span the two medians' intervals allow, which covers no "
                   f"drift between them); give max_repetitions {MIN_PAIRED} or more")  # fmt: skip
    elif reps and reps < MIN_PAIRED:
        out.append(f"repetitions: {reps}, fewer than the {MIN_PAIRED} cycles a paired interval needs: a server whose "
                   f"max_measuring_s ({config.get('max_measuring_s')} s) ends its cycles before {MIN_PAIRED} will have "
                   f"its comparisons unpaired; give repetitions {MIN_PAIRED} or more")  # fmt: skip
    return out
