"""Command line: ``lorabench bundle verify|render`` (a run's bundle or a study archive), ``lorabench study
pack|check`` (publish a run's results as a study archive, check a published study against its archive),
``lorabench job KIND SPEC.json`` (a job without Snakemake, e.g. on a GPU box; KIND is loadtest, runtime_load,
prefix_cache or rate_sweep; SPEC holds ``job``, the rule's params, ``kind``, the kind's params where it has any
(``jobs.JobKind.to_json``), ``inputs``, its input files by name as ``lorabench.job.input_paths`` gives them, and
``out_dir``), ``lorabench check-config CONFIG`` (the checks a run makes of its config before any job, those of what
an engine would refuse at start included), ``lorabench compare RUN_A RUN_B`` (two runs' paired comparisons and
cells side by side, lorabench.compare), ``lorabench --version``.

Exit codes (``EXIT_CODES``): 0 done, 1 a check failed (a bundle, an archive or a published study that does not
verify), 2 a usage error (argparse: an unknown command or option, a missing argument), 3 a config that cannot run
(the error names the key)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from .io import setup_job_logging

# Each job kind's module and class (imported when asked for: lorabench.jobs imports no kind).
JOB_KINDS = {
    "loadtest": "loadtest:LoadTest",
    "runtime_load": "runtime_load:RuntimeLoading",
    "prefix_cache": "prefix_cache:PrefixCaching",
    "rate_sweep": "rate_sweep:RateSweep",
}


EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CONFIG = 0, 1, 2, 3
EXIT_CODES = {
    EXIT_OK: "done",
    EXIT_FAILED: "a check failed (a bundle, an archive or a published study that does not verify)",
    EXIT_USAGE: "usage error (an unknown command or option, a missing argument)",
    EXIT_CONFIG: "a config that cannot run (the error names the key)",
}
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def version() -> str:
    """The installed package's version, else the checkout's pyproject.toml's (run from a checkout not installed)."""
    try:
        return metadata.version("lorabench")
    except metadata.PackageNotFoundError:
        try:
            return str(tomllib.loads(PYPROJECT.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="lorabench",
        description="Multi-LoRA serving benchmarks: check a study config, run one job, publish or verify results.",
        epilog="exit codes: " + "; ".join(f"{code} {what}" for code, what in EXIT_CODES.items()),
    )
    ap.add_argument("--version", action="version", version=f"lorabench {version()}")
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
    st = sub.add_parser(
        "study", help="publish a run as a study archive, or check a published study against its archive"
    )
    st_sub = st.add_subparsers(dest="action", required=True)
    sp = st_sub.add_parser("pack", help="a results folder as DIR/archive.tar.xz, with the tables rebuilt from it")
    sp.add_argument("results", type=Path, help="a finished run's results folder")
    sp.add_argument("--config", type=Path, required=True, help="the study's config file (merged as a run merges it)")
    sp.add_argument("--out", type=Path, required=True, help="the study folder to write (summary.csv, verdicts.json)")
    sp.add_argument("--study", help="the name to publish under (default: the config's study)")
    sp.add_argument("--checkout", type=Path, default=Path("."), help="lorabench checkout (claims registry, code)")
    sc = st_sub.add_parser("check", help="verify each study's archive and compare the tables rebuilt from it")
    sc.add_argument("folders", type=Path, nargs="+", help="study folders (each holding archive.tar.xz)")
    sc.add_argument("--checkout", type=Path, default=Path("."), help="lorabench checkout (claims registry, code)")
    c = sub.add_parser(
        "check-config",
        help="check a study config as a run does before any job (keys, references, files, what an engine would "
        "refuse at start) and exit: 0 OK, 3 not runnable",
    )
    c.add_argument("config", type=Path)
    cmp = sub.add_parser(
        "compare",
        help="two runs side by side: every paired comparison and cell both measured, with their 95 %% intervals, and "
        "which lie apart (a run: a results folder, a summary.json, or a published study or its archive)",
    )
    cmp.add_argument("run_a", type=Path)
    cmp.add_argument("run_b", type=Path)
    cmp.add_argument("--json", action="store_true", help="print the figures as JSON instead of the table")
    cmp.add_argument("--checkout", type=Path, default=Path("."), help="lorabench checkout (rebuilds archives)")
    j = sub.add_parser("job", help="run one job from a JSON spec")
    j.add_argument("kind", choices=sorted(JOB_KINDS))
    j.add_argument("spec", type=Path)
    j.add_argument("--log", type=Path)
    args = ap.parse_args(argv)

    if args.cmd == "study":
        return _study(args)
    if args.cmd == "bundle" and _is_archive(args.bundle):
        from .archive import ArchiveError, read, rebuild

        try:
            arch = read(args.bundle)
        except ArchiveError as e:
            print(f"{e}", file=sys.stderr)
            return EXIT_FAILED
        print(f"{args.bundle}: OK (every checksum matches; {arch.index['schema']})")
        if args.action == "render" and not arch.rebuildable:
            print(f"{args.bundle}: holds tables only (no results to render a report from): nothing rendered")
        elif args.action == "render":
            setup_job_logging(None)
            print(rebuild(arch, args.out, args.checkout.resolve()).report)
        return 0
    if args.cmd == "bundle":
        import tarfile

        from .bundle import render_from_bundle, verify_bundle

        try:
            problems = verify_bundle(args.bundle)
        except (OSError, tarfile.TarError) as e:
            problems = [f"not a readable bundle (.tar.gz): {e}"]
        if problems:
            print(f"{args.bundle}: FAILED", file=sys.stderr)
            for p in problems:
                print(f"  {p}", file=sys.stderr)
            return EXIT_FAILED
        print(f"{args.bundle}: OK (every checksum matches)")
        if args.action == "render":
            setup_job_logging(None)
            print(render_from_bundle(args.bundle, args.out, args.checkout))
        return 0
    if args.cmd == "check-config":
        import yaml

        from .config import ConfigError, load_file
        from .preflight import check_before_jobs

        try:
            config = load_file(args.config)
            check_before_jobs(config)
        except ConfigError as e:
            print(f"{args.config}: {e}", file=sys.stderr)
            return EXIT_CONFIG
        except OSError as e:
            print(f"{args.config}: cannot be read: {e.strerror or e}", file=sys.stderr)
            return EXIT_CONFIG
        except yaml.YAMLError as e:
            print(f"{args.config}: not YAML: {e}", file=sys.stderr)
            return EXIT_CONFIG
        from .config_warnings import config_warnings

        for w in config_warnings(config):
            print(f"{args.config}: warning: {w}", file=sys.stderr)
        print(f"{args.config}: OK")
        return 0
    if args.cmd == "compare":
        from .compare import CompareError, load_summary, pairs, report

        try:
            first, second = (load_summary(p, args.checkout) for p in (args.run_a, args.run_b))
        except (CompareError, OSError, json.JSONDecodeError) as e:
            print(f"{e}", file=sys.stderr)
            return EXIT_CONFIG
        found = pairs(first, second)
        text = report(found, str(args.run_a), str(args.run_b))
        print(json.dumps([p.to_json() for p in found], indent=1) if args.json else text)
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
    return EXIT_USAGE


def _is_archive(path: Path) -> bool:
    from .archive import is_study_archive

    return path.is_file() and is_study_archive(path)


def _study(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from . import archive
    from .config import ConfigError, load_file

    checkout = args.checkout.resolve()
    if args.action == "pack":
        try:
            cfg = load_file(args.config)
        except ConfigError as e:
            print(f"{args.config}: {e}", file=sys.stderr)
            return EXIT_CONFIG
        setup_job_logging(None)
        try:
            out = archive.pack_results(args.results, cfg, args.study or cfg["study"], args.out / archive.NAME)
            with tempfile.TemporaryDirectory() as tmp:
                built = archive.rebuild(archive.read(out), Path(tmp), checkout, report=False)
                shutil.copy(built.summary_csv, args.out / "summary.csv")
                (args.out / "verdicts.json").write_bytes(archive.published_verdicts(built.verdicts.read_bytes()))
        except archive.ArchiveError as e:
            print(f"{e}", file=sys.stderr)
            return EXIT_FAILED
        print(f"{out}: {out.stat().st_size / 1e6:.2f} MB; {args.out}/summary.csv and verdicts.json rebuilt from it")
        return 0
    failed = 0
    setup_job_logging(None)
    for folder in args.folders:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                problems = archive.check_published(folder, checkout, Path(tmp))
            except archive.ArchiveError as e:
                problems = [str(e)]
        failed += bool(problems)
        print(f"{folder}: {'OK' if not problems else 'FAILED'}")
        for p in problems:
            print(f"  {p}")
    return EXIT_FAILED if failed else EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
