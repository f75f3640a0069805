"""Capacity at the SLO from rate sweeps' ``sweep.json`` files, with what each cycle found: the figure a study's
report gives (``lorabench.capacity``), and below it per cycle the rates that bracket capacity, so that one sees
whether the interval is the noise between cycles or the distance between the rates measured. With --by-adapter,
TTFT per adapter at each rate (which adapters waited).

usage: .venv/bin/python benchmarks/capacity_table.py CONFIG SWEEP_JSON [...] [--by-adapter]
       (CONFIG names the servers and mixes; each SWEEP_JSON is results/rate_sweep/SERVER/sweep.json or a study's
       copy; --by-adapter reads records.jsonl[.gz] beside it)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from lorabench.capacity import ServerInfo, SweepFile, capacity_model  # noqa: E402
from lorabench.config import load_file  # noqa: E402
from lorabench.io import read_jsonl, stored  # noqa: E402
from lorabench.measure.sweep import Capacity  # noqa: E402


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("sweeps", nargs="+", type=Path)
    ap.add_argument("--by-adapter", action="store_true")
    args = ap.parse_args(argv)
    cfg = load_file(args.config)
    model = capacity_model(args.sweeps, ServerInfo.of_config(cfg), cfg.get("conditions"))
    if not model["slo"]:
        print("no sweep with an SLO")
        return 1
    print(f"SLO: {model['slo']['text']}")
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
    for path in args.sweeps:
        f = SweepFile.read(path)
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
