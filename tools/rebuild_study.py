"""Rebuild a study's summary, verdicts and report from a saved results folder, without any server.

Used for results that were measured elsewhere (the GPU studies run on a lent machine) and for publishing them
under studies/: the pipeline's own rules (summary_aggregate, queues_summary, claims_evaluate, report_render) run
with this checkout's code and claims file on a copy of the results, so a rebuilt study takes exactly the code
paths of a normal run. RESULTS_DIR itself is never modified.

usage: .venv/bin/python tools/rebuild_study.py RESULTS_DIR OUT_DIR --config config/gpu-h200.yaml [--study NAME]

--study publishes the study under another name than the config's `study` (the report's title and its bundle):
for a config run on another kind of machine than the one its name says (llama2-7b-rank16-h100).

RESULTS_DIR holds what study_results.py restores (servers/*, runtime_load/*, prefix_cache/*, rate_sweep/*) plus
envs/*.json, adapters/*.json and model/manifest.json. Servers and sweeps of the config not measured yet get stub
outputs that say so; the weights and the engine freezes, which the report rules do not read, are stood in for, so
that Snakemake has nothing upstream to run. The request set is made again by the workload_requests rule, unless
RESULTS_DIR has workload/requests.json or .json.gz (kept gzipped in OUT_DIR): needed where prompts have a length in
tokens, which takes the model's tokenizer, and the weights stay behind.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from lorabench.config import load_file, prefix_cache_servers, rate_sweep_mixes, runtime_load_servers  # noqa: E402
from lorabench.engines import get_engine  # noqa: E402
from lorabench.io import gzip_writer, open_stored, read_json, stored, write_json, write_jsonl  # noqa: E402
from lorabench.job import server_job  # noqa: E402
from lorabench.jobs import write_not_run  # noqa: E402
from lorabench.rate_sweep import RateSweep  # noqa: E402

NOT_MEASURED = "not measured yet (waits for the next stretch of GPU time)"
REPORT_RULES = ("summary_aggregate", "queues_summary", "claims_evaluate", "report_render")
SWEEP_RULES = ("capacity_summary",)  # with a rate_sweep section (forced, a rule adds its outputs to the run)
# Outputs of the server_loadtest and runtime_load rules (workflow/rules/measure.smk).
SERVER_OUTPUTS = ("measurements.jsonl", "records.jsonl", "metrics.jsonl", "facts.json", "server.log")
# Jobs beside the measuring ones: folder under results/, the servers they copy, their result file, the job flag.
SIDE_JOBS = (
    ("runtime_load", runtime_load_servers, "load.json", "runtime"),
    ("prefix_cache", prefix_cache_servers, "prefix.json", "prefix"),
)
# Outputs of the rate_sweep rule (workflow/rules/sweep.smk).
SWEEP_OUTPUTS = ("sweep.json", "records.jsonl", "facts.json", "server.log")
SUMMARY_FILES = ("measurements.csv", "summary.csv", "server_facts.csv", "summary.json")
# published gzipped (NAME.gz): the largest files of a study (h200-1.7b's summary.json is 6.9 MB, a tenth packed),
# and the tree travels whole with every call to a lent GPU
PACKED = ("measurements.csv", "summary.json")
# Restored outputs carry no Snakemake metadata: without mtime they are kept (as in tools/device_stretch.sh).
TRIGGERS = ("params", "input", "code", "software-env")
UPSTREAM_RULES = ("model_build", "adapter_build", "engine_env")  # stood in for: a rebuild never runs them


class RebuildError(RuntimeError):
    """A results folder that cannot be rebuilt as it is."""


def _copy_job(src: Path, dst: Path, outputs: tuple[str, ...]) -> None:
    missing = [f for f in outputs if not (src / f).exists()]
    if missing:
        raise RebuildError(f"{src}: {', '.join(missing)} missing (a saved job has every output of its rule)")
    dst.mkdir(parents=True, exist_ok=True)
    for f in outputs:
        shutil.copy2(src / f, dst / f)


def _need(path: Path) -> Path:
    if not path.exists():
        raise RebuildError(f"{path} missing: the report rules read it")
    return path


def stage(cfg: dict, res: Path, work: Path) -> None:
    """The results folder the rules see, in ``work``: every rule output upstream of the report rules exists."""
    for s in sorted(cfg["servers"]):
        dst = work / "servers" / s
        if (res / "servers" / s / "facts.json").exists():
            _copy_job(res / "servers" / s, dst, SERVER_OUTPUTS)
            # Facts are re-read from each server's log with this checkout's parsers, then published with the study.
            facts = read_json(dst / "facts.json")
            log = (dst / "server.log").read_text(errors="replace")
            if facts.get("status") == "ok" and not log.startswith("# left out of the study archive"):
                facts["log"] = get_engine(facts["engine"]).parse_log(log)
                write_json(dst / "facts.json", facts)
            continue
        # A server not measured yet (a study spread over several stretches of machine time) is listed as such.
        job = server_job(cfg, s, hardware="")
        stub = {
            "server": s,
            "engine": job.server.engine,
            "engine_version": job.engine_version,
            "status": NOT_MEASURED,
            # as published before adapters were recorded for unmeasured servers: the summary stays the same
            "config": {k: v for k, v in job.facts_config().items() if k != "adapters"},
        }
        write_json(dst / "facts.json", stub)
        for f in ("measurements.jsonl", "records.jsonl", "metrics.jsonl"):
            write_jsonl(dst / f, [])
        (dst / "server.log").write_text(f"# {NOT_MEASURED}\n")
    for kind, servers, result, flag in SIDE_JOBS:
        for s in servers(cfg):
            dst = work / kind / s
            if (res / kind / s / result).exists():
                _copy_job(res / kind / s, dst, (result, "records.jsonl", "server.log"))
                continue
            job = server_job(cfg, s, hardware="", **{flag: True})
            write_json(dst / result, {"server": job.server_id, "engine": job.server.engine, "status": NOT_MEASURED})
            write_jsonl(dst / "records.jsonl", [])
            (dst / "server.log").write_text(f"# {NOT_MEASURED}\n")
    for s in sorted(rate_sweep_mixes(cfg)):
        dst = work / "rate_sweep" / s
        if (res / "rate_sweep" / s / "sweep.json").exists():
            _copy_job(res / "rate_sweep" / s, dst, SWEEP_OUTPUTS)
            continue
        write_not_run(RateSweep.of_config(cfg, s), server_job(cfg, s, hardware=""), dst, NOT_MEASURED)
        # a stub made here: no machine measured it, so its facts name none (not the one rebuilding the report)
        stub = read_json(dst / "facts.json")
        stub.pop("machine", None)
        write_json(dst / "facts.json", stub)
    for e in sorted(cfg["engines"]):
        (work / "envs").mkdir(parents=True, exist_ok=True)
        measured = any((res / "servers" / s).is_dir() for s, v in cfg["servers"].items() if v["engine"] == e)
        if not measured and not (res / "envs" / f"{e}.json").exists():
            # an engine none of whose servers ran yet: its record says so, its version is the config's
            eng = cfg["engines"][e]
            record = {
                "engine": e,
                "kind": eng["kind"],
                "version": None,
                "version_config": eng["version"],
                "status": NOT_MEASURED,
                "python": None,
            }
            write_json(work / "envs" / f"{e}.json", record)
            (work / "envs" / f"{e}.freeze.txt").write_text("")
            continue
        shutil.copy2(_need(res / "envs" / f"{e}.json"), work / "envs" / f"{e}.json")
        freeze = res / "envs" / f"{e}.freeze.txt"
        if freeze.exists():
            shutil.copy2(freeze, work / "envs" / freeze.name)
        else:
            (work / "envs" / freeze.name).write_text("")
    for a in sorted(cfg["adapters"]):
        (work / "adapters" / a).mkdir(parents=True, exist_ok=True)  # the weights stay behind
        shutil.copy2(_need(res / "adapters" / f"{a}.json"), work / "adapters" / f"{a}.json")
    (work / "model" / "weights").mkdir(parents=True, exist_ok=True)
    shutil.copy2(_need(res / "model" / "manifest.json"), work / "model" / "manifest.json")
    # the request set, where the study keeps it (a long-prompt workload needs the model's tokenizer to be made
    # again, and the weights stay behind): as measured, or gzipped
    requests = res / "workload" / "requests.json"
    if stored(requests).exists():
        (work / "workload").mkdir(parents=True, exist_ok=True)
        with open_stored(requests, "rb") as src:
            (work / "workload" / "requests.json").write_bytes(src.read())


def fresh(results: Path) -> None:
    """Every staged file dated now: copies keep their saved dates, and one older than a checkout file it is built
    from (a fresh clone dates every file at the clone) would have Snakemake build it again, the model's weights
    included (minutes and gigabytes for a 7-8B shape), though no report rule reads them."""
    now = time.time()
    for p in results.rglob("*"):
        os.utime(p, (now, now), follow_symlinks=False)


def link_checkout(work: Path) -> None:
    """The checkout's files beside the results (config/, envs/, ...): a config names its files relative to it."""
    for p in ROOT.iterdir():
        if p.name not in ("results", "logs", ".snakemake", ".git") and not (work / p.name).exists():
            (work / p.name).symlink_to(p)


def snakemake(
    work: Path, config: Path, targets: list[str], rules: tuple[str, ...], force: bool, study: str | None = None
) -> None:
    cmd = [sys.executable, "-m", "snakemake", *targets, "--snakefile", str(ROOT / "workflow" / "Snakefile")]
    cmd += ["--cores", "1", "--scheduler", "greedy", "--configfile", str(config), "--replace-workflow-config"]
    cmd += ["--config", f"study={study}"] if study else []
    cmd += ["--rerun-triggers", *TRIGGERS, "--allowed-rules", *rules, *(["--forcerun", *rules] if force else [])]
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        logs = "".join(f"--- {f}\n{f.read_text()[-3000:]}" for f in sorted((work / "logs").glob("*.log")))
        raise RebuildError(f"snakemake {' '.join(targets)} failed:\n{proc.stderr[-6000:]}\n{logs}")


def rebuild(results: Path, out: Path, config: Path, study: str | None = None) -> Path:
    cfg = load_file(config)
    with tempfile.TemporaryDirectory(prefix="lorabench-rebuild-") as tmp:
        work = Path(tmp)
        stage(cfg, results, work / "results")
        fresh(work / "results")
        link_checkout(work)
        if not (work / "results" / "workload" / "requests.json").exists():
            snakemake(work, config.resolve(), ["results/workload/requests.json"], ("workload_requests",), False)
        rules = REPORT_RULES + (SWEEP_RULES if rate_sweep_mixes(cfg) else ())
        snakemake(work, config.resolve(), ["results/report/index.html"], rules, True, study)
        logs = work / "logs"
        built = [r for r in UPSTREAM_RULES if (logs / f"{r}.log").exists() or (logs / r).is_dir()]
        if built:
            raise RebuildError(f"the rebuild ran {', '.join(built)}: a staged result looked out of date")
        publish(cfg, results, work / "results", out)
        for rule in ("claims_evaluate", "report_render"):
            for line in (work / "logs" / f"{rule}.log").read_text().splitlines():
                if " INFO " in line:
                    print(line)
    return out / "report" / "index.html"


def publish(cfg: dict, res: Path, built: Path, out: Path) -> None:
    """What a published study holds: tables, verdicts, report, facts, runtime-loading results, manifests (raw
    records stay in the saved jobs and the bundle)."""
    for sub, names in (("summary", SUMMARY_FILES), ("claims", ("verdicts.json",))):
        (out / sub).mkdir(parents=True, exist_ok=True)
        for name in names:
            if name in PACKED:  # gzipped (read_json reads either); a plain copy of an earlier publish goes
                with gzip_writer(out / sub / f"{name}.gz") as dst:
                    dst.write((built / sub / name).read_bytes())
                (out / sub / name).unlink(missing_ok=True)
            else:
                shutil.copy(built / sub / name, out / sub / name)
    (out / "report").mkdir(parents=True, exist_ok=True)
    for f in (out / "report").iterdir():  # the report as this rebuild rendered it: no figure of an earlier one
        if f.is_file():
            f.unlink()
    for f in sorted((built / "report").iterdir()):
        if f.is_file():
            shutil.copy(f, out / "report" / f.name)
    for s in sorted(cfg["servers"]):
        facts = built / "servers" / s / "facts.json"
        (out / "servers" / s).mkdir(parents=True, exist_ok=True)
        shutil.copy(facts, out / "servers" / s / "facts.json")
        if read_json(facts).get("status") == NOT_MEASURED:  # its measurements: none, kept as a saved job's are
            with gzip_writer(out / "servers" / s / "measurements.jsonl.gz"):
                pass
            (out / "servers" / s / "measurements.jsonl").unlink(missing_ok=True)
    # load.json with the figures the summary recomputed from its cycles; prefix.json as the job wrote it
    summary = read_json(built / "summary" / "summary.json")
    for s, load in zip(runtime_load_servers(cfg), summary["runtime"], strict=True):
        write_json(out / "runtime_load" / s / "load.json", load)
    for s, pc in zip(prefix_cache_servers(cfg), summary.get("prefix_cache", []), strict=True):
        write_json(out / "prefix_cache" / s / "prefix.json", pc)
    # the rate sweeps' results as their jobs wrote them, the capacity tables and plots built from them
    for s in sorted(rate_sweep_mixes(cfg)):
        (out / "rate_sweep" / s).mkdir(parents=True, exist_ok=True)
        for name in ("sweep.json", "facts.json"):
            shutil.copy(built / "rate_sweep" / s / name, out / "rate_sweep" / s / name)
    if rate_sweep_mixes(cfg):
        shutil.rmtree(out / "capacity", ignore_errors=True)
        shutil.copytree(built / "capacity", out / "capacity", ignore=shutil.ignore_patterns(".snakemake_timestamp"))
    for sub in ("envs", "adapters", "model"):
        (out / sub).mkdir(parents=True, exist_ok=True)
        for f in (res / sub).glob("*.json"):
            shutil.copy(f, out / sub / f.name)
    for f in (res / "envs").glob("*.freeze.txt"):
        shutil.copy(f, out / "envs" / f.name)
    # the request set kept gzipped, where it came with the results (made again only with the model's tokenizer)
    requests, packed = res / "workload" / "requests.json", res / "workload" / "requests.json.gz"
    if requests.exists():
        (out / "workload").mkdir(parents=True, exist_ok=True)
        with gzip_writer(out / "workload" / "requests.json.gz") as dst:
            dst.write(requests.read_bytes())
    elif packed.exists() and res.resolve() != out.resolve():
        (out / "workload").mkdir(parents=True, exist_ok=True)
        shutil.copy(packed, out / "workload" / "requests.json.gz")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--study", help="the name to publish the study under (default: the config's)")
    args = ap.parse_args()
    try:
        print(rebuild(args.results.resolve(), args.out.resolve(), args.config, args.study))
    except RebuildError as e:
        print(f"rebuild_study: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
