"""Command line: ``lorabench bundle verify|render``, ``lorabench job KIND SPEC.json`` (a job without Snakemake,
e.g. on a GPU box; KIND is loadtest, runtime_load, prefix_cache or rate_sweep; SPEC holds ``job``, the rule's
params, ``kind``, the kind's params where it has any (``jobs.JobKind.to_json``), ``inputs``, its input files by
name as ``lorabench.job.input_paths`` gives them, and ``out_dir``), ``lorabench check-config CONFIG``."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from .io import setup_job_logging

# Each job kind's module and class (imported when asked for: lorabench.jobs imports no kind).
JOB_KINDS = {
    "loadtest": "loadtest:LoadTest",
    "runtime_load": "runtime_load:RuntimeLoading",
    "prefix_cache": "prefix_cache:PrefixCaching",
    "rate_sweep": "rate_sweep:RateSweep",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lorabench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bundle", help="verify a bundle or re-render its report")
    b.add_argument("action", choices=["verify", "render"])
    b.add_argument("bundle", type=Path)
    b.add_argument("--out", type=Path, default=Path("rerendered"), help="folder for the re-rendered report")
    b.add_argument(
        "--checkout",
        type=Path,
        default=Path("."),
        help="lorabench checkout whose report/templates render the report (its commit goes in the provenance)",
    )
    c = sub.add_parser("check-config", help="validate a study config and exit")
    c.add_argument("config", type=Path)
    j = sub.add_parser("job", help="run one job from a JSON spec")
    j.add_argument("kind", choices=sorted(JOB_KINDS))
    j.add_argument("spec", type=Path)
    j.add_argument("--log", type=Path)
    args = ap.parse_args(argv)

    if args.cmd == "bundle":
        from .bundle import render_from_bundle, verify_bundle

        problems = verify_bundle(args.bundle)
        if problems:
            print(f"{args.bundle}: FAILED", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
            return 1
        print(f"{args.bundle}: OK (every checksum matches)")
        if args.action == "render":
            setup_job_logging(None)
            print(render_from_bundle(args.bundle, args.out, args.checkout))
        return 0
    if args.cmd == "check-config":
        from .adapter_paths import check_adapter_folders
        from .config import ConfigError, load_file

        try:
            check_adapter_folders(load_file(args.config))
        except ConfigError as e:
            print(f"{args.config}: {e}", file=sys.stderr)
            return 2
        print(f"{args.config}: OK")
        return 0
    if args.cmd == "job":
        from .job import ServerJob
        from .jobs import JobFiles, run_job

        setup_job_logging(args.log)
        spec = json.loads(args.spec.read_text())
        module, cls = JOB_KINDS[args.kind].split(":")
        kind = getattr(importlib.import_module(f"lorabench.{module}"), cls).from_json(json.dumps(spec.get("kind")))
        job = ServerJob.from_json(json.dumps(spec["job"]))
        run_job(kind, job, JobFiles.of(argparse.Namespace(**spec["inputs"])), Path(spec["out_dir"]))
        return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
