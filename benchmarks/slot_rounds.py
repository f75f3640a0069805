"""Does a burst pass the adapter slots in rounds? Re-reads finished server jobs and prints, per condition and burst
size (non-streamed bursts), the median burst time beside the rounds its requests need through the server's slots
(``slot_rounds`` on each burst's adapters, in request order, from its per-request records; a round of k distinct
adapters counted 1 + DISTINCT_ADAPTER_COST x (k - 1), as tools/estimate_study.py counts it) and the time per round.
Where the model holds, the time per round is about the same for every condition of a server that uses adapters
(the base model's rounds run faster: no adapter's work); tools/estimate_study.py times bursts so.

No server runs: it is arithmetic on the saved jobs' records.

usage: .venv/bin/python benchmarks/slot_rounds.py JOB_DIR [...]
       (a server job's folder: results/servers/SERVER or a study's studies/NAME/servers/SERVER)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
sys.path.insert(0, str(ROOT / "tools"))

from estimate_study import burst_costs, slots  # noqa: E402

from lorabench.io import read_json, read_jsonl  # noqa: E402


def report(job: Path) -> list[str]:
    facts = read_json(job / "facts.json")
    cfg = facts.get("config") or {}
    n, base_slot = slots(facts["engine"], bool(cfg.get("lora")), cfg.get("max_loras"))
    costs = burst_costs(job, n, base_slot)
    cells: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for r in read_jsonl(job / "measurements.jsonl"):
        if r.get("warmup") or r.get("stream") or not r.get("burst_s") or r["measurement_id"] not in costs:
            continue
        per = r["burst_s"] / int(r.get("n_bursts") or 1)
        cells.setdefault((int(r["burst"]), r["condition"]), []).append((per, costs[r["measurement_id"]]))
    out = [f"{job} ({facts['engine']} {facts.get('engine_version', '')}, {n or 'no'} slots)"]
    out.append(f"  {'condition':16} {'burst':>5} {'burst s':>8} {'rounds':>7} {'s/round':>8}")
    for (burst, cond), vals in sorted(cells.items()):
        b = statistics.median(v[0] for v in vals)
        c = statistics.median(v[1] for v in vals)
        out.append(f"  {cond:16} {burst:5d} {b:8.2f} {c:7.2f} {b / c:8.2f}")
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    for path in argv:
        print("\n".join(report(Path(path))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
