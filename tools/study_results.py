"""Keep a study's finished server jobs under studies/ and put them back, so a study that needs several stretches
of machine time runs each server job once.

  python tools/study_results.py save RESULTS STUDY_DIR      finished jobs of RESULTS/servers and RESULTS/runtime_load
                                                            into STUDY_DIR (per-request records compressed)
  python tools/study_results.py restore STUDY_DIR RESULTS   the saved jobs back into RESULTS, as Snakemake's outputs

A job counts as finished when every output exists and its facts say ``status: ok``. Restored outputs have no
Snakemake metadata, so a run with ``--rerun-triggers params input code software-env`` (no mtime) keeps them;
a job whose parameters change in the config is a different job only once its metadata exists, so delete its
folder under STUDY_DIR to measure it again.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

JOBS = {
    "servers": (("facts.json", "measurements.jsonl", "metrics.jsonl", "server.log"), "records.jsonl", "facts.json"),
    "runtime_load": (("load.json", "server.log"), "records.jsonl", "load.json"),
}


def _finished(d: Path, plain: tuple[str, ...], records: str, facts: str) -> bool:
    if not all((d / f).exists() for f in (*plain, records)):
        return False
    return json.loads((d / facts).read_text()).get("status") == "ok"


def save(results: Path, study: Path) -> list[str]:
    saved = []
    for kind, (plain, records, facts) in JOBS.items():
        for d in sorted((results / kind).glob("*")):
            if not d.is_dir() or not _finished(d, plain, records, facts):
                continue
            dst = study / kind / d.name
            dst.mkdir(parents=True, exist_ok=True)
            for f in plain:
                shutil.copy2(d / f, dst / f)
            with open(d / records, "rb") as src, gzip.open(dst / (records + ".gz"), "wb", compresslevel=9) as out:
                shutil.copyfileobj(src, out)
            saved.append(f"{kind}/{d.name}")
    return saved


def restore(study: Path, results: Path) -> list[str]:
    restored = []
    for kind, (plain, records, _facts) in JOBS.items():
        for d in sorted((study / kind).glob("*")):
            if not (d / (records + ".gz")).exists() or not all((d / f).exists() for f in plain):
                continue
            dst = results / kind / d.name
            dst.mkdir(parents=True, exist_ok=True)
            for f in plain:
                shutil.copy2(d / f, dst / f)
            with gzip.open(d / (records + ".gz"), "rb") as src, open(dst / records, "wb") as out:
                shutil.copyfileobj(src, out)
            restored.append(f"{kind}/{d.name}")
    return restored


def main(argv: list[str]) -> None:
    if len(argv) != 3 or argv[0] not in ("save", "restore"):
        raise SystemExit(__doc__)
    verb, a, b = argv[0], Path(argv[1]), Path(argv[2])
    done = save(a, b) if verb == "save" else restore(a, b)
    print(f"{verb}: {len(done)} job(s): {' '.join(done) or '-'}")


if __name__ == "__main__":
    main(sys.argv[1:])
