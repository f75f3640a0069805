"""Rebuild a study's summary, verdicts and report from a saved results folder, without any server.

Used for results that were measured elsewhere (the GPU studies run on a lent machine) and for publishing them
under studies/: the summary, the claims and the report are recomputed with this checkout's code and claims file.

usage: .venv/bin/python tools/rebuild_study.py RESULTS_DIR OUT_DIR --config config/gpu-h200.yaml
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from lorabench.claims import evaluate_file  # noqa: E402
from lorabench.config import load_file, runtime_load_servers  # noqa: E402
from lorabench.engines import get_engine  # noqa: E402
from lorabench.io import read_json, setup_job_logging, write_json, write_jsonl  # noqa: E402
from lorabench.job import server_job  # noqa: E402
from lorabench.report import render_report  # noqa: E402
from lorabench.runtime_load import load_result  # noqa: E402
from lorabench.summary import aggregate  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--config", type=Path, required=True)
    args = ap.parse_args()
    setup_job_logging(None)
    cfg = load_file(args.config)
    res, out = args.results, args.out
    servers = sorted(cfg["servers"])
    runtime = [s for s in runtime_load_servers(cfg) if (res / "runtime_load" / s / "load.json").exists()]
    summary = out / "summary"
    # Facts are re-read from each server's log with this checkout's parsers, then published with the study.
    # A server not measured yet (a study spread over several stretches of machine time) is listed as such.
    for s in servers:
        if not (res / "servers" / s / "facts.json").exists():
            job = server_job(cfg, s, hardware="")
            stub = {
                "server": s,
                "engine": job.server.engine,
                "engine_version": job.engine_version,
                "status": "not measured yet (waits for the next stretch of GPU time)",
                # as published before adapters were recorded for unmeasured servers: the summary stays the same
                "config": {k: v for k, v in job.facts_config().items() if k != "adapters"},
            }
            write_json(out / "servers" / s / "facts.json", stub)
            write_jsonl(out / "servers" / s / "measurements.jsonl", [])
            continue
        facts = read_json(res / "servers" / s / "facts.json")
        log_path = res / "servers" / s / "server.log"
        if log_path.exists() and facts.get("status") == "ok":
            facts["log"] = get_engine(facts["engine"]).parse_log(log_path.read_text(errors="replace"))
        write_json(out / "servers" / s / "facts.json", facts)
    # Runtime-loading figures are recomputed from their cycles with this checkout's code, too.
    for s in runtime:
        load = read_json(res / "runtime_load" / s / "load.json")
        rl = server_job(cfg, s, hardware="", runtime=True).runtime_load
        assert rl is not None
        load.update(load_result(load["cycles"], rl, load["resident_adapter"], load["unlisted_path_refused"]))
        write_json(out / "runtime_load" / s / "load.json", load)
    aggregate(
        measurement_files=[
            str(res / "servers" / s / "measurements.jsonl")
            if (res / "servers" / s / "measurements.jsonl").exists()
            else str(out / "servers" / s / "measurements.jsonl")
            for s in servers
        ],
        fact_files=[str(out / "servers" / s / "facts.json") for s in servers],
        runtime_files=[str(out / "runtime_load" / s / "load.json") for s in runtime],
        env_files=[str(res / "envs" / f"{e}.json") for e in sorted(cfg["engines"])],
        baseline=cfg.get("baseline"),
        conditions=cfg["conditions"],
        out={
            "measurements": str(summary / "measurements.csv"),
            "summary": str(summary / "summary.csv"),
            "facts": str(summary / "server_facts.csv"),
            "json": str(summary / "summary.json"),
        },
    )
    adapters = [str(res / "adapters" / f"{a}.json") for a in sorted(cfg["adapters"])]
    verdicts = out / "claims" / "verdicts.json"
    evaluate_file(
        cfg["claims"],
        str(summary / "summary.json"),
        str(res / "model" / "manifest.json"),
        adapters,
        str(verdicts),
        str(ROOT / "config" / "models" / "qwen3-1.7b.json"),
    )
    render_report(
        study=cfg["study"],
        config=cfg,
        summary_path=str(summary / "summary.json"),
        verdicts_path=str(verdicts),
        model_path=str(res / "model" / "manifest.json"),
        adapter_paths=adapters,
        env_paths=[str(res / "envs" / f"{e}.json") for e in sorted(cfg["engines"])],
        out_html=out / "report" / "index.html",
        out_provenance=out / "report" / "provenance.json",
        templates=ROOT / "report" / "templates",
        checkout=ROOT,
    )
    # Small per-server facts and manifests travel with the published study (raw records stay in the bundle).
    for sub in ("envs", "adapters", "model"):
        (out / sub).mkdir(parents=True, exist_ok=True)
        for f in (res / sub).glob("*.json"):
            shutil.copy(f, out / sub / f.name)
    for f in (res / "envs").glob("*.freeze.txt"):
        shutil.copy(f, out / "envs" / f.name)
    print(out / "report" / "index.html")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
