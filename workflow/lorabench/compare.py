"""Two runs side by side (``lorabench compare RUN_A RUN_B``): do they agree?

A run is a results folder (``results/``, or a study folder holding one), a ``summary.json``, or a published study
(its folder or its ``archive.tar.xz``: the tables are rebuilt from the archive first, lorabench.archive). For every
comparison within a server that both runs measured (the same server, condition, reference condition and burst
size, each paired per cycle in its own run) and every cell both measured (server, condition, burst: the median
throughput and its 95 % interval), the two figures and whether their intervals lie apart: two runs of one study
agree on a figure when its intervals overlap. Absolute throughputs compare only on one machine; the paired
comparisons (percent) are what a rerun elsewhere should reproduce.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .io import read_json


class CompareError(ValueError):
    """A run that cannot be read: names the path and what is missing."""


def load_summary(path: Path, checkout: Path) -> dict[str, Any]:
    """A run's summary.json (see the module's docstring for what a run may be)."""
    from . import archive

    if path.is_file() and path.name in ("summary.json", "summary.json.gz"):
        return read_json(path.with_suffix("") if path.suffix == ".gz" else path)
    for candidate in (path / "summary.json", path / "summary" / "summary.json",
                      path / "results" / "summary" / "summary.json"):  # fmt: skip
        if candidate.is_file() or candidate.with_name(candidate.name + ".gz").is_file():
            return read_json(candidate)  # or its gzipped copy
    arch = path if path.is_file() else path / archive.NAME
    if arch.is_file() and archive.is_study_archive(arch):
        a = archive.read(arch)
        if not a.rebuildable:
            raise CompareError(f"{arch}: a study of tables only (no records to rebuild its comparisons from)")
        with tempfile.TemporaryDirectory(prefix="lorabench-compare-") as tmp:
            built = archive.rebuild(a, Path(tmp), checkout, report=False)
            return json.loads(built.summary_json.read_text())
    raise CompareError(f"{path}: no summary.json, results folder or study archive here")


@dataclass(frozen=True)
class Side:
    """One run's figure: the median and its 95 % interval."""

    value: float
    lo: float
    hi: float

    def text(self, unit: str) -> str:
        if unit == "%":
            return f"{self.value:+.1f}% [{self.lo:+.1f}, {self.hi:+.1f}]"
        return f"{self.value:,.1f} [{self.lo:,.1f}, {self.hi:,.1f}]"


@dataclass(frozen=True)
class Pair:
    """One figure both runs measured, what it is (``kind``: a paired comparison or a cell) and the two sides."""

    kind: str  # "comparison" (percent, paired per cycle in each run) | "cell" (tok/s)
    key: str
    a: Side
    b: Side

    @property
    def apart(self) -> bool:
        """The two intervals do not overlap: the runs differ on this figure beyond their spread."""
        return self.a.hi < self.b.lo or self.b.hi < self.a.lo

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "a": vars(self.a), "b": vars(self.b),
                "difference": self.b.value - self.a.value, "apart": self.apart}  # fmt: skip


def _num(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _side(value: Any, lo: Any, hi: Any) -> Side | None:
    v, a, b = _num(value), _num(lo), _num(hi)
    return None if v is None or a is None or b is None else Side(v, a, b)


def pairs(a: dict[str, Any], b: dict[str, Any]) -> list[Pair]:
    """Every paired comparison, then every cell, that both summaries hold with an interval, in a stable order."""
    out = []

    def comps(s: dict[str, Any]) -> dict[str, Side]:
        found = {}
        for c in s.get("comparisons") or []:
            side = _side(c.get("ratio_pct"), c.get("ratio_lo_pct"), c.get("ratio_hi_pct"))
            if side and c.get("paired_by") != "unpaired":
                found[f"{c['server']} {c['condition']} vs {c['reference']}, burst {c['burst']}"] = side
        return found

    def cells(s: dict[str, Any]) -> dict[str, Side]:
        found = {}
        for r in s.get("rows") or []:
            side = _side(r.get("throughput_median"), r.get("throughput_ci_lo"), r.get("throughput_ci_hi"))
            if side and r.get("status") == "ok":
                found[f"{r['server']} {r['condition']}, burst {r['burst']}"] = side
        return found

    for kind, of in (("comparison", comps), ("cell", cells)):
        xa, xb = of(a), of(b)
        out += [Pair(kind, k, xa[k], xb[k]) for k in sorted(set(xa) & set(xb))]
    return out


def report(found: list[Pair], a_name: str, b_name: str) -> str:
    """The text ``lorabench compare`` prints: one line per figure, then how many lie apart."""
    lines = [f"A: {a_name}", f"B: {b_name}"]
    for kind, unit, title in (("comparison", "%", "paired comparisons (each run's own pairs)"),
                              ("cell", "tok/s", "cells: median throughput, tok/s")):  # fmt: skip
        these = [p for p in found if p.kind == kind]
        if not these:
            continue
        width = max(len(p.key) for p in these)
        lines += ["", f"{title}:", f"{'':{width}}  {'A':>26}  {'B':>26}  B-A"]
        for p in these:
            diff = f"{p.b.value - p.a.value:+.1f}" + (" points" if unit == "%" else "")
            mark = "  APART" if p.apart else ""
            lines.append(f"{p.key:{width}}  {p.a.text(unit):>26}  {p.b.text(unit):>26}  {diff}{mark}")
        apart = sum(p.apart for p in these)
        lines.append(f"{apart} of {len(these)} {kind}s differ beyond their intervals")
    if not found:
        lines.append("no figure with an interval is in both runs")
    return "\n".join(lines)
