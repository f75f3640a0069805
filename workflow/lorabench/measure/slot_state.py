"""What came before a burst on its server: the burst sent just before it and the adapters inferred resident.

The cost of an adapter mix depends on what the server's adapter slots held before it (docs/methodology.md: on a
2-slot SGLang server a ``pq`` burst read -19.9 % against base after a ``pq`` burst, -24.3 % after a ``p`` burst), so
every burst row records (``SlotState``):

- ``predecessor``: the cell (``CONDITION/BURST/s|n``) of the burst the harness sent just before it on the same
  server start, warm-up bursts included: the first measured burst's predecessor is the warm-up's last burst; it is
  None only for the first burst after the server started (its first warm-up burst, or its first measured burst
  where ``warmup_bursts`` is 0). ``predecessor_id`` names that burst (its ``measurement_id``).
- ``resident_inferred``: the adapters inferred resident in the slots when it started, most recently used first: the
  adapters of the requests sent since the server started (warm-up included; the canary's single requests before
  the warm-up are not counted), least recently used evicted first, as many as the server's adapter slots
  (``max_loras``, or the engine's default). Inferred from the harness's own request history, not read from the
  engine: an engine that evicts otherwise, or keeps an adapter loaded beyond the slots, is not seen. LoRA off: none.
- ``burst_adapters``: the distinct adapters the burst's own requests name, in their order (the base model left
  out: it takes no slot between bursts), so that a reader can tell a warm start (all of them resident) from a
  cold one without the request set.

``SlotHistory`` keeps what these are inferred from through one server start (``reset`` at each start).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..loadgen.workload import BASE

FIELDS = ("predecessor", "predecessor_id", "resident_inferred", "burst_adapters")


def distinct_adapters(adapters: Sequence[str]) -> list[str]:
    """The distinct adapters of a burst's requests, in first-use order, the base model left out."""
    return list(dict.fromkeys(a for a in adapters if a and a != BASE))


@dataclass(frozen=True)
class SlotState:
    """A burst's predecessor and the adapters inferred resident when it started (the module's docstring)."""

    predecessor: str | None
    predecessor_id: str | None
    resident_inferred: tuple[str, ...]
    burst_adapters: tuple[str, ...]

    @property
    def warm(self) -> bool | None:
        """Whether every adapter of the burst was inferred resident when it started (None: it names none)."""
        if not self.burst_adapters:
            return None
        return set(self.burst_adapters) <= set(self.resident_inferred)

    def to_json(self) -> dict[str, Any]:
        return {
            "predecessor": self.predecessor,
            "predecessor_id": self.predecessor_id,
            "resident_inferred": list(self.resident_inferred),
            "burst_adapters": list(self.burst_adapters),
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> SlotState | None:
        """The state a burst row records; None for a row written before it was recorded."""
        if "resident_inferred" not in row:
            return None
        return cls(
            row.get("predecessor"),
            row.get("predecessor_id"),
            tuple(row.get("resident_inferred") or ()),
            tuple(row.get("burst_adapters") or ()),
        )


@dataclass
class SlotHistory:
    """The bursts sent on one server start, as far as ``SlotState`` needs them. ``slots``: the server's adapter
    slots (0 with LoRA off; None where unknown: every adapter since the start counts as resident)."""

    slots: int | None
    recent: list[str] = field(default_factory=list)  # adapters, most recently used first
    last: tuple[str, str] | None = None  # (cell, measurement id) of the burst sent last

    def reset(self) -> None:
        """A fresh server: nothing sent, nothing resident."""
        self.recent, self.last = [], None

    def resident(self) -> list[str]:
        """The adapters inferred resident now, most recently used first."""
        if self.slots is None:
            return list(self.recent)
        return self.recent[: max(self.slots, 0)]

    def before(self, adapters: Sequence[str]) -> SlotState:
        """The state at the start of a burst whose requests name ``adapters`` (in request order)."""
        pred, pred_id = self.last if self.last is not None else (None, None)
        return SlotState(pred, pred_id, tuple(self.resident()), tuple(distinct_adapters(adapters)))

    def after(self, cell: str, measurement_id: str, adapters: Sequence[str]) -> None:
        """A burst of ``cell`` was sent: its requests' adapters, in request order, become the most recently used
        (the last request's adapter first: requests are admitted in the order they are sent)."""
        for a in adapters:
            if a and a != BASE:
                if a in self.recent:
                    self.recent.remove(a)
                self.recent.insert(0, a)
        self.last = (cell, measurement_id)
