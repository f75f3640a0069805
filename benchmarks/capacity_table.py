"""Capacity at the SLO from rate sweeps' ``sweep.json`` files, with what each cycle found: the figure a study's
report gives (``lorabench.capacity``), and below it per cycle the rates that bracket capacity, so that one sees
whether the interval is the noise between cycles or the distance between the rates measured. With --by-adapter,
TTFT per adapter at each rate (which adapters waited). With --slo, the same runs judged against another target
(e.g. ``ttft_p99_ms=500,tpot_p99_ms=50``: TPOT instead of ITL), each point's TPOT percentiles taken from the
per-request records where its sweep predates the figure; the runs stay those the sweep's own SLO chose (its search
bisected toward that SLO's knee, so under another one more cycles may end as bounds), and goodput stays as measured
under the sweep's SLO.

usage: .venv/bin/python benchmarks/capacity_table.py CONFIG SWEEP_JSON [...] [--by-adapter] [--slo TERM=MS,...]
       (CONFIG names the servers and mixes; each SWEEP_JSON is results/rate_sweep/SERVER/sweep.json or a study's
       copy; --by-adapter and --slo read records.jsonl[.gz] beside it)
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.capacity import ServerInfo, SweepFile, capacity_model  # noqa: E402
from lorabench.config import load_file  # noqa: E402
from lorabench.io import read_jsonl, stored  # noqa: E402
from lorabench.loadgen.arrivals import percentile  # noqa: E402
from lorabench.measure.rate_points import SLO_TERMS  # noqa: E402
from lorabench.measure.sweep import Capacity, Slo  # noqa: E402


def _records(sweep_json: Path) -> list[dict]:
    path = sweep_json.parent / "records.jsonl"  # or records.jsonl.gz, as a study keeps it
    return list(read_jsonl(path)) if stored(path).exists() else []


def by_adapter(sweep_json: Path) -> list[str]:
    """Per mix and rate (fraction of the probe's rate): per adapter, requests in the window, median and max TTFT."""
    cells: dict[tuple[str, float], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in _records(sweep_json):
        if r.get("in_window") and r.get("fraction") is not None and r.get("ttft_s") is not None:
            cells[(r["mix"], r["fraction"])][r["adapter"]].append(1000 * r["ttft_s"])
    out = []
    for (mix, frac), per in sorted(cells.items()):
        parts = [f"{a} {len(v)}: {statistics.median(v):.0f}/{max(v):.0f}" for a, v in sorted(per.items())]
        out.append(f"  {mix} at {100 * frac:.1f} %: TTFT ms median/max per adapter (n): " + "; ".join(parts))
    return out


def parse_slo(text: str) -> Slo:
    """``ttft_p99_ms=500,tpot_p99_ms=50`` -> Slo; a term not named is not checked."""
    known = [field for _, field, _ in SLO_TERMS]
    terms = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        if key.strip() not in known or not value:
            raise SystemExit(f"--slo: {part!r}: give TERM=MS, TERM one of {', '.join(known)}")
        terms[key.strip()] = float(value)
    return Slo(**terms)


def judged_against(path: Path, slo: Slo) -> SweepFile:
    """The sweep with ``slo`` as its target, each point's TPOT percentiles filled in from the records where the
    sweep predates them (the window's successful requests, each one's mean inter-token latency)."""
    f = SweepFile.read(path)
    per: dict[tuple[str, int, float], list[float]] = defaultdict(list)
    for r in _records(path):
        if r.get("in_window") and not r.get("error") and r.get("fraction") is not None and r.get("itl_s"):
            per[(r["mix"], r["cycle"], r["fraction"])].append(1000 * statistics.fmean(r["itl_s"]))
    for s in f.sweeps:
        s.points = [
            p if not math.isnan(p.tpot_ms_p99) else dataclasses.replace(
                p, **{f"tpot_ms_p{q}": percentile(per.get((p.mix, p.cycle, p.fraction), []), q) for q in (50, 90, 99)}
            )
            for p in s.points
        ]  # fmt: skip
    return dataclasses.replace(f, slo=slo)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("sweeps", nargs="+", type=Path)
    ap.add_argument("--by-adapter", action="store_true")
    ap.add_argument("--slo", type=parse_slo, help="judge the runs against this target instead of the sweeps' own")
    args = ap.parse_args(argv)
    cfg = load_file(args.config)
    files = [judged_against(p, args.slo) if args.slo else SweepFile.read(p) for p in args.sweeps]
    model = capacity_model(files, ServerInfo.of_config(cfg), cfg.get("conditions"))
    if not model["slo"]:
        print("no sweep with an SLO")
        return 1
    print(
        f"SLO: {model['slo']['text']}"
        + (" (not the sweeps' own: their runs judged again, goodput as measured)" if args.slo else "")
    )
    for mach in model["machines"]:  # only where the sweeps ran on more than one machine
        print(f"machine {mach['boot_id'][:8] or '(not recorded)'} from {mach['started_utc'] or '?'}: "
              f"{', '.join(mach['servers'])}")  # fmt: skip
    for m in model["mixes"]:
        print(f"\nmix {m['mix']} ({m['about']})")
        print(
            f"  {'server':<18} {'capacity':>9} {'interval':>18} {'cover':>6} {'probe':>7} {'goodput':>8}  LoRA's cost"
        )
        for r in m["rows"]:
            if r["status"] != "ok":
                print(f"  {r['server']:<18} {r['status']}")
                continue
            print(f"  {r['server']:<18} {r['capacity']:>9} {r['interval']:>18} {r['coverage']:>6} {r['probe_rate']:>7} "
                  f"{r['goodput']:>8}  {r['lora_cost']}")  # fmt: skip
            if r["limit"]:
                print(f"  {'':<18} set by {r['limit']}")
            if r["host"]:
                print(f"  {'':<18} at capacity: {r['host']}")
        print(f"  finding: {m['finding']}")
    print("\nper cycle: capacity (req/s), the rates bracketing it, how it was placed")
    for path, f in zip(args.sweeps, files, strict=True):
        for s in f.sweeps:
            assert f.slo is not None
            cap = Capacity.of(s, f.slo)
            before = ", ".join(f"{p.achieved_per_s:.2f}" for p in s.discarded_probes)
            host = ", ".join(f"{k} {v:g}" for k, v in s.probe.host.items())
            print(f"{f.server}/{s.mix}: probe {s.max_rate_per_s:.2f} req/s{f' ({host})' if host else ''}"
                  f"{f' after {before}' if before else ''}; {s.stop_reason}")  # fmt: skip
            for c in cap.per_cycle:
                runs = len(s.cycle_points(c.cycle))
                print(f"  cycle {c.cycle} ({runs} runs): {c.capacity_per_s:.2f}{' ' + c.bound if c.bound else ''}, "
                      f"between {c.last_meeting_per_s:.2f} and {c.first_failing_per_s:.2f}: {c.method}")  # fmt: skip
            if args.by_adapter:
                print("\n".join(by_adapter(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
