"""Method v2: a server job measures in cycles of interleaved bursts.

A cell is condition x burst size x streamed or not. A cycle is one burst of every cell of the server, in an order
drawn at random for that cycle (``cycle_order``: a permutation seeded by the workload's seed and the cycle's number,
so a run repeats its orders and the rows record each burst's place in its cycle). A fixed rotation gave each cell the
same predecessor in every cycle, and the state a predecessor leaves (adapters resident in the slots) biased that
cell in a way no interval shows (docs/methodology.md); a random order lets each cell follow every other.
Throughput is read from the non-streamed bursts, TTFT and inter-token latencies from the streamed ones (``stream:
both``, the default; ``on`` streams every burst and reads throughput from them too; ``off`` streams none).

Cycles repeat until every comparison of the server is within its target, or a maximum number of cycles or of
measuring seconds is reached. After the minimum cycles, with ``focus``, a cycle measures only the cells still
needed (``Progress.needed``): the non-streamed cells of the comparisons not yet within target, both sides; the
streamed cells keep the minimum cycles' bursts. Cycles then take seconds where they took tens of seconds, and
what is left of the time goes to the wide intervals.

A comparison is a condition against the server's reference condition at the same burst size, paired per cycle
(``paired.PairedRatio``); a server with a single condition has none, and its cells must instead reach
``target_ci_pct`` (the 95 % interval of their median). Nothing here talks to a server: the job passes one coroutine
that runs one burst of a cell (``BurstFn``).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..median import MedianInterval
from .paired import CycleKey, PairedRatio

log = logging.getLogger(__name__)

CellKey = tuple[str, int]  # (condition, burst): a cell of the throughput-reading mode
STREAM_MODES: dict[str, tuple[bool, ...]] = {"both": (False, True), "on": (True,), "off": (False,)}


@dataclass(frozen=True, order=True)
class Cell:
    condition: str
    burst: int
    stream: bool
    server: str = ""  # in a group's cycles (lorabench.group): the member serving it; "" in a server's own job

    @property
    def tracked(self) -> str:
        """The condition as ``Progress`` tracks it: qualified by the server in a group's cycles (``SERVER:COND``)."""
        return f"{self.server}:{self.condition}" if self.server else self.condition


def cycle_cells(conditions: list[str], bursts: list[int], stream: str) -> list[Cell]:
    """Every cell of a server, in the order of its conditions, then burst sizes, then non-streamed first."""
    if stream not in STREAM_MODES:
        raise ValueError(f"stream: {stream!r} is not one of {sorted(STREAM_MODES)}")
    return [Cell(c, b, s) for c in conditions for b in sorted(bursts) for s in STREAM_MODES[stream]]


ORDER_SALT = "lorabench.cycle-order"  # keeps the order's draws apart from the request set's, which share the seed


def cycle_order(cells: list[Cell], cycle: int, seed: int) -> list[Cell]:
    """The cells of cycle ``cycle`` in a random order of their own: a fresh permutation per cycle, drawn from the
    seed and the cycle's number (a string seed, hashed by ``random`` with SHA-512, not Python's salted hash: the
    same in every process), so the same seed gives the same orders and every cell still runs once per cycle.
    Over many cycles each cell follows each other cell about equally often; a Williams design would balance that
    exactly in fewer cycles (docs/methodology.md)."""
    out = list(cells)
    random.Random(f"{ORDER_SALT}/{seed}/{cycle}").shuffle(out)
    return out


def throughput_stream(stream: str) -> bool:
    """Whether throughput is read from streamed bursts (only where no burst is sent non-streamed)."""
    return stream == "on"


@dataclass(frozen=True)
class Targets:
    """When cycles stop: at least ``min_cycles``; then once every comparison's paired interval is within
    ±``target_points`` (and, on a server without comparisons, every cell's interval within ±``target_ci_pct``);
    at the latest after ``max_cycles`` or ``max_measuring_s`` seconds of bursts."""

    min_cycles: int
    max_cycles: int
    target_points: float
    target_ci_pct: float
    max_measuring_s: float
    focus: bool = False  # after min_cycles, only the cells still needed (Progress.needed)


@dataclass
class Progress:
    """The throughput of every measured burst (of the throughput-reading mode), by cell and cycle, and what the
    stop rule last said."""

    reference: str
    conditions: list[str]
    bursts: list[int]
    references: dict[str, str] = field(default_factory=dict)  # a condition's own reference (another workload's)
    values: dict[tuple[str, int], dict[CycleKey, float]] = field(default_factory=dict)
    cycles: int = 0
    measuring_s: float = 0.0
    stop_reason: str = ""
    focused_from: int = 0  # the first cycle that measured only the cells still needed (0: none did)

    def add(self, condition: str, burst: int, key: CycleKey, value: float) -> None:
        if not math.isnan(value):
            self.values.setdefault((condition, burst), {})[key] = value

    def comparisons(self) -> list[tuple[tuple[str, int], tuple[str, int], PairedRatio]]:
        """Every condition but the reference against the reference at the same burst size, paired per cycle (a
        condition of another workload: against its own in ``references``)."""
        out = []
        for b in sorted(self.bursts):
            for c in self.conditions:
                ref = self.references.get(c, self.reference)
                if c != ref:
                    den = (ref, b)
                    ratio = PairedRatio.of_pairs(self.values.get((c, b), {}), self.values.get(den, {}))
                    out.append(((c, b), den, ratio))
        return out

    def _unmet(self, t: Targets) -> list[tuple[tuple[CellKey, ...], str]]:
        """Every target not yet met: the (condition, burst) cells whose bursts can still narrow it (both sides of
        a comparison; on a server without comparisons, the cell itself) and a phrase saying how wide it is."""
        comps = self.comparisons()
        if comps:
            return [
                ((num, den), f"{num[0]}/{num[1]} vs {den[0]}: ±{p.halfwidth_points:.1f} points (n={p.n})")
                for num, den, p in comps
                if not p.within(t.target_points)
            ]
        out: list[tuple[tuple[CellKey, ...], str]] = []
        for (c, b), vals in sorted(self.values.items()):
            iv = MedianInterval.of(list(vals.values()))
            if iv.coverage < 0.95 or iv.halfwidth_pct > t.target_ci_pct:
                out.append((((c, b),), f"{c}/{b}: ±{iv.halfwidth_pct:.1f} % (n={iv.n})"))
        return out

    def wide(self, t: Targets) -> list[str]:
        """What is not yet within its target, one phrase each."""
        if not self.comparisons() and not self.values:
            return ["nothing measured"]
        return [phrase for _, phrase in self._unmet(t)]

    def needed(self, t: Targets) -> set[tuple[str, int]]:
        """The (condition, burst) cells whose bursts can still narrow a wide interval: both sides of every
        comparison not yet within its target (on a server without comparisons, the cells not yet within theirs)."""
        return {key for keys, _ in self._unmet(t) for key in keys}

    def done(self, t: Targets) -> bool:
        """The stop rule, after a cycle; sets ``stop_reason``."""
        if self.cycles < t.min_cycles:
            return False
        if self.cycles >= t.max_cycles:
            self.stop_reason = f"max_cycles ({t.max_cycles}) reached"
            return True
        if self.measuring_s >= t.max_measuring_s:
            self.stop_reason = f"max_measuring_s ({t.max_measuring_s:g} s) reached after {self.cycles} cycles"
            return True
        if not self.wide(t):
            self.stop_reason = f"every target met after {self.cycles} cycles"
            return True
        return False


# One burst of a cell: (cell, cycle, position in the cycle, cells in the cycle) -> (its throughput, its wall time in
# seconds)
BurstFn = Callable[[Cell, int, int, int], Awaitable[tuple[float, float]]]


def focused(cells: list[Cell], progress: Progress, targets: Targets, tp_stream: bool) -> list[Cell]:
    """The cells of the next cycle: all of them up to the minimum cycles (or without ``focus``), then those of
    the throughput-reading mode that ``progress.needed`` lists (all of them again if it lists none, which the stop
    rule then ends)."""
    if not targets.focus or progress.cycles < targets.min_cycles:
        return cells
    need = progress.needed(targets)
    return [c for c in cells if c.stream == tp_stream and (c.tracked, c.burst) in need] or cells


async def run_cycles(
    burst: BurstFn,
    cells: list[Cell],
    progress: Progress,
    targets: Targets,
    start: int,
    until_cycle: int | None,
    stream: str,
    seed: int = 0,
) -> None:
    """Cycles on the server now serving (``start`` of the job's server starts), numbered on from
    ``progress.cycles``, until ``until_cycle`` (an earlier start's share) or, where it is None, the stop rule;
    each in its own order (``cycle_order`` with ``seed``)."""
    tp_stream = throughput_stream(stream)
    while True:
        cycle = progress.cycles
        if until_cycle is not None and cycle >= until_cycle:
            return
        this = focused(cells, progress, targets, tp_stream) if until_cycle is None else cells
        if len(this) < len(cells) and not progress.focused_from:
            progress.focused_from = cycle
        order = cycle_order(this, cycle, seed)
        for pos, cell in enumerate(order):
            value, wall = await burst(cell, cycle, pos, len(order))
            progress.measuring_s += wall
            if cell.stream == tp_stream:
                progress.add(cell.tracked, cell.burst, (start, cycle), value)
        progress.cycles += 1
        wide = progress.wide(targets)
        log.info(
            "cycle %d done (%.0f s of bursts%s): %s",
            cycle,
            progress.measuring_s,
            f"; {len(order)} of {len(cells)} cells, those still needed" if len(order) < len(cells) else "",
            "every target met" if not wide else f"{len(wide)} not yet within target: " + "; ".join(wide[:4]),
        )
        if until_cycle is None and progress.done(targets):
            log.info("cycles stop: %s", progress.stop_reason)
            return


def cycles_per_start(targets: Targets, starts: int) -> list[int | None]:
    """Where each server start stops: the first starts share the minimum cycles evenly (cycle numbers), the last
    one runs the stop rule."""
    share = math.ceil(targets.min_cycles / starts)
    return [share * (k + 1) for k in range(starts - 1)] + [None]
