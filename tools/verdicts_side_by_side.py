"""The source's claims judged by several studies, side by side: one row per claim, each study's verdict and
measured figure, so a reader sees which data judged each claim (the same claims file on two model shapes, two
engines' versions, two machines).

usage: .venv/bin/python tools/verdicts_side_by_side.py STUDY_DIR [STUDY_DIR ...] [--all]

Each STUDY_DIR holds verdicts.json (a study's claims_evaluate output, as committed under studies/) or
claims/verdicts.json (a run's results folder). Rows
whose verdict is "not comparable" or "not run" in every study are left out unless --all is given; the counts per
study close the table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

QUIET = ("not comparable", "not run")


def load(study: Path) -> dict:
    path = study / "verdicts.json"
    if not path.exists():
        path = study / "claims" / "verdicts.json"
    if not path.exists():
        raise SystemExit(f"{path}: no verdicts (run the study, or tools/rebuild_study.py, first)")
    return json.loads(path.read_text())


def cell(claim: dict | None) -> str:
    if claim is None:
        return "-"
    measured = claim.get("measured_text") or ""
    if measured and (claim.get("claimed") or {}).get("unit") == "pct":
        measured += " %"
    return f"{claim['verdict']} ({measured})" if measured and claim["verdict"] not in QUIET else claim["verdict"]


def table(studies: list[Path], everything: bool = False) -> list[str]:
    data = [load(s) for s in studies]
    by_id = [{c["id"]: c for c in d["claims"]} for d in data]
    ids = list(dict.fromkeys(i for d in data for i in (c["id"] for c in d["claims"])))
    head = ["claim", "claimed", *(s.name for s in studies)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i in ids:
        claims = [b.get(i) for b in by_id]
        if not everything and all(c is None or c["verdict"] in QUIET for c in claims):
            continue
        claimed = next(c["claimed_text"] for c in claims if c is not None)
        lines.append(f"| {i} | {claimed} | " + " | ".join(cell(c) for c in claims) + " |")
    for s, d in zip(studies, data, strict=True):
        counts = ", ".join(f"{k} {v}" for k, v in sorted(d["counts"].items()) if v)
        lines.append(f"\n{s.name}: {counts}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("studies", nargs="+", type=Path)
    ap.add_argument("--all", action="store_true", help="also the claims no study could judge")
    args = ap.parse_args()
    print("\n".join(table(args.studies, args.all)))


if __name__ == "__main__":
    main()
