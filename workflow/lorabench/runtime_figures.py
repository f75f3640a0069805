"""What ``load.json`` says of a runtime-loading job's cycles (``load_result``): apart from the job that measures
them, so that the summary, which recomputes these figures from saved cycles, need not import the measuring code."""

from __future__ import annotations

import re
import statistics
from typing import Any

from .job import RuntimeLoad


def _error_text(body: str) -> str:
    """The message of an engine's error reply (its body is kept cut at 300 characters, so not always JSON)."""
    m = re.search(r'"(?:error_message|message|detail)"\s*:\s*"((?:[^"\\]|\\.)*)"', body)
    return (m.group(1) if m else body)[:200]


def cold_vs_resident(loaded: list[dict[str, Any]]) -> dict[str, Any]:
    """The first request to a just-loaded adapter against the resident adapter's, over the cycles whose load call
    succeeded. "Slower" means the cold median latency exceeds the resident one by more than the resident requests'
    own range across cycles (and at least 2 %); the TTFT difference is paired per cycle (cold and resident requests
    of one cycle are sent seconds apart)."""
    resident = [float(c["resident_latency_ms"]) for c in loaded]
    res_med = statistics.median(resident)
    margin = max(0.02, (max(resident) - min(resident)) / res_med)
    cold = float(statistics.median(float(c["cold_latency_ms"]) for c in loaded))
    ttft_diff = [float(c["cold_ttft_ms"]) - float(c["resident_ttft_ms"]) for c in loaded]
    return {
        "slower": cold > res_med * (1 + margin),
        "cold_latency_ms": cold,
        "resident_latency_ms": res_med,
        "margin": margin,
        "ttft_diff_ms_median": float(statistics.median(ttft_diff)),
        "ttft_cold_higher": sum(d > 0 for d in ttft_diff),
        "cycles": len(loaded),
    }


def load_result(cycles: list[dict[str, Any]], rl: RuntimeLoad, resident: str, refused: bool) -> dict[str, Any]:
    """What ``load.json`` says of the cycles: each one, and the medians over the cycles whose load call succeeded
    (a refused load times nothing: its "cold" requests met an adapter that was already there)."""
    loaded = [c for c in cycles if c["load_status"] == 200]

    def med(key: str) -> float | None:
        return float(statistics.median(float(c[key]) for c in loaded)) if loaded else None

    checked = all("listed_after_unload" in c for c in cycles)
    return {
        "adapter": rl.adapter,
        "resident_adapter": resident,
        "burst": rl.burst,
        "cycles": cycles,
        "loads_ok": len(loaded),
        **{f"{k}_median": med(k) for k in ("load_s", "unload_s")},
        **{
            f"{g}_{fig}_ms_median": med(f"{g}_{fig}_ms")
            for fig in ("ttft", "latency")
            for g in ("cold", "warm", "resident")
        },
        "cold_slower_than_resident": cold_vs_resident(loaded)["slower"] if loaded else None,
        "unlisted_path_refused": refused,
        "load_ok": len(loaded) == len(cycles),
        "load_errors": sorted({_error_text(c["load_body"]) for c in cycles if c["load_status"] != 200}),
        # after an unload: the adapter gone from /v1/models, and a request naming it refused or served by an
        # implicit reload (None for cycles measured before either was checked)
        "unload_ok": all(c["unload_status"] == 200 and not c["listed_after_unload"] for c in cycles)
        if checked
        else None,
        "reloads_on_request": any(c.get("reloaded_by_request") for c in cycles) if checked else None,
    }
