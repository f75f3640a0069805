"""Run `snakemake --lint json` and fail on every lint except one we decline on purpose.

Declined: "Specify a conda environment or container for each rule". The orchestrator's environment is the
project's .venv (requirements.txt, pinned) and every engine gets its own pinned venv (envs/), built and recorded
by the engine_env rule; conda is not available on the machines this runs on.
"""

from __future__ import annotations

import subprocess
import sys

DECLINED = ("Specify a conda environment or container for each rule.",)


def main() -> int:
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    titles = [line.strip()[2:].rstrip(":") for line in out.splitlines() if line.startswith("    * ")]
    problems = [t for t in titles if t not in DECLINED]
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not titles):
        print(out)
        return 1
    for p in problems:
        print("lint:", p)
    print(
        f"snakemake --lint: {len(problems)} lint(s) to fix; {len(titles) - len(problems)} declined "
        "(conda/container, see tools/snakemake_lint.py)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
