"""Carry-over between bursts: a cell's figures split by the state its bursts started from.

Each burst row since the random order per cycle records its predecessor (the cell sent just before it on the same
server) and the adapters inferred resident in the slots when it started, with the adapters its own requests name
(``measure.slot_state``). From those rows:

- ``start_state``: "warm" where every adapter of the burst was inferred resident at its start, "cold" where one
  was not, None where the row does not say (written before it was recorded) or the burst names no adapter;
- ``warm_cold``: per cell, the throughput of its warm bursts and of its cold bursts, each the median with its 95 %
  interval and count (unpaired: a burst's state is not chosen per cycle, so the two medians also carry what drifts
  between cycles), and whether the two intervals lie apart;
- ``warm_cold`` with a ``reference`` condition: the same split of the cell's paired cost, each burst's throughput
  against the reference condition's burst of the same cycle (burst size, streamed or not, server start), in
  percent: what a mix costs from a warm start and what from a cold one;
- ``by_predecessor``: per cell, its throughput by the cell that ran before it.

Rows are ``measurements.jsonl`` rows (lists) or the summary's flattened ones (``|``-joined strings).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .stats import MedianInterval

CellKey = tuple[str, str, int, bool]  # (server, condition, burst, stream)


def _names(v: Any) -> list[str] | None:
    """A list of adapter names as a row holds it: a list, or a ``|``-joined string (the summary's flattened
    rows; "" for none); None where the row has no such field."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, str):
        return [a for a in v.split("|") if a]
    return [str(a) for a in v]


def start_state(row: Mapping[str, Any]) -> str | None:
    """A burst's start state: "warm" (every adapter of the burst inferred resident at its start), "cold" (one or
    more not), or None (the row does not record it, or the burst names no adapter)."""
    resident, own = _names(row.get("resident_inferred")), _names(row.get("burst_adapters"))
    if resident is None or not own:
        return None
    return "warm" if set(own) <= set(resident) else "cold"


def _measured(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The measured bursts without errors and with a throughput."""
    out = []
    for r in rows:
        tp = r.get("throughput_tok_s")
        if r.get("warmup") or (r.get("n_errors") or 0) > 0 or tp is None or math.isnan(float(tp)):
            continue
        out.append(r)
    return out


def _key(r: Mapping[str, Any]) -> CellKey:
    return (str(r["server"]), str(r["condition"]), int(r["burst"]), bool(r.get("stream", True)))


def _values(rows: list[Mapping[str, Any]], reference: str | None) -> list[tuple[Mapping[str, Any], float]]:
    """Each row with its figure: its throughput, or (``reference`` given) its throughput against the reference
    condition's burst of the same cycle, in percent (rows without such a burst left out)."""
    if reference is None:
        return [(r, float(r["throughput_tok_s"])) for r in rows]
    ref = {
        (r["server"], r.get("server_start", 0), r.get("cycle"), int(r["burst"]), bool(r.get("stream", True))):
            float(r["throughput_tok_s"])
        for r in rows
        if r["condition"] == reference and r.get("cycle") is not None
    }  # fmt: skip
    out = []
    for r in rows:
        den = ref.get((r["server"], r.get("server_start", 0), r.get("cycle"), int(r["burst"]),
                       bool(r.get("stream", True))))  # fmt: skip
        if r["condition"] != reference and den:
            out.append((r, 100.0 * (float(r["throughput_tok_s"]) / den - 1.0)))
    return out


def _apart(a: MedianInterval, b: MedianInterval, level: float = 0.95) -> bool:
    """Whether two medians' intervals (each covering at least ``level``) do not overlap."""
    if min(a.coverage, b.coverage) < level or math.isnan(a.lo) or math.isnan(b.lo):
        return False
    return a.hi < b.lo or b.hi < a.lo


@dataclass(frozen=True)
class WarmCold:
    """One cell's figure from its warm-start bursts and from its cold-start bursts (``warm_cold``)."""

    server: str
    condition: str
    burst: int
    stream: bool
    figure: str  # "throughput_tok_s", or "vs_REFERENCE_pct" (the cost paired per cycle)
    warm: MedianInterval
    cold: MedianInterval

    @property
    def apart(self) -> bool:
        """Whether the two intervals lie apart: the start state moves the figure beyond its spread."""
        return _apart(self.warm, self.cold)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"server": self.server, "condition": self.condition, "burst": self.burst,
                               "stream": self.stream, "figure": self.figure}  # fmt: skip
        for name, iv in (("warm", self.warm), ("cold", self.cold)):
            out |= {f"n_{name}": iv.n, f"{name}_median": iv.median, f"{name}_lo": iv.lo, f"{name}_hi": iv.hi,
                    f"{name}_coverage": iv.coverage}  # fmt: skip
        return {**out, "apart": self.apart}


def warm_cold(rows: Iterable[Mapping[str, Any]], reference: str | None = None) -> list[WarmCold]:
    """Per cell (server, condition, burst size, streamed or not) whose bursts record their start state: its
    figure over its warm bursts and over its cold ones (``start_state``), each the median with its 95 % interval
    and count. The figure is the throughput, or with ``reference`` the burst's throughput against the reference
    condition's burst of the same cycle, in percent (the reference's own cells left out)."""
    groups: dict[CellKey, dict[str, list[float]]] = {}
    for r, v in _values(_measured(rows), reference):
        state = start_state(r)
        if state is not None:
            groups.setdefault(_key(r), {"warm": [], "cold": []})[state].append(v)
    figure = "throughput_tok_s" if reference is None else f"vs_{reference}_pct"
    return [
        WarmCold(*key, figure, MedianInterval.of(g["warm"]), MedianInterval.of(g["cold"]))
        for key, g in sorted(groups.items())
    ]


def by_predecessor(rows: Iterable[Mapping[str, Any]]) -> dict[CellKey, dict[str, MedianInterval]]:
    """Per cell, its throughput by the cell that ran just before it (``predecessor``; "-" for none, the first
    burst after a server start), each the median with its 95 % interval and count: where one predecessor's
    interval lies apart from another's, what the slots held before moves the cell."""
    groups: dict[CellKey, dict[str, list[float]]] = {}
    for r in _measured(rows):
        if _names(r.get("resident_inferred")) is None:  # written before the slot state was recorded
            continue
        pred = r.get("predecessor")
        name = pred if isinstance(pred, str) and pred else "-"
        groups.setdefault(_key(r), {}).setdefault(name, []).append(float(r["throughput_tok_s"]))
    return {key: {p: MedianInterval.of(v) for p, v in sorted(g.items())} for key, g in sorted(groups.items())}
