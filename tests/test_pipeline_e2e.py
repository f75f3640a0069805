"""End to end on the default study with real vLLM (CPU build) servers, then what users do afterwards:
nothing to redo, partial reruns after edits (planned job lists), bundles verified and re-rendered, and no server
process left behind. The study runs once per session in a copy of the repository (slow: several minutes)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from lorabench.bundle import render_from_bundle, verify_bundle
from lorabench.device import FOREIGN_SERVERS
from lorabench.engines import all_server_markers
from lorabench.io import read_json, read_jsonl
from lorabench.session import IGNORED

from .conftest import EAGER, ROOT, seed_inputs

pytestmark = pytest.mark.slow
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
ENV_ROOT = str(ROOT / ".lorabench" / "envs")  # engine venvs are shared: built once per machine


# What a study runs from: the product, not the checkout's studies/, docs/, dev/, benchmarks/, tests/ or .git (the
# one test file a study config names, its chat dataset, aside).
PRODUCT = ("workflow", "config", "envs", "report", "profiles", "tools", "pyproject.toml", "Makefile",
           "requirements.txt", "requirements-dev.txt", "tests/fixtures/chat-small.jsonl")  # fmt: skip


def copy_repo(dest: Path) -> Path:
    """The product's files (``PRODUCT``: tracked and untracked, ignored ones left out) copied into ``dest``, as a
    study runs from them."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *PRODUCT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest


def run_study(
    dest: Path, config: str, built: Path | None = None, conditions: list[str] | None = None, **settings: object
) -> Path:
    """A copy of the checkout in ``dest`` with the study of ``config`` (config/studies/...) run to its report;
    where ``built`` (``conftest.built_inputs``) is given, from those inputs and with ``EAGER`` servers, with the
    top-level ``settings`` (e.g. max_repetitions) written over the config's and, where ``conditions`` is given,
    every server's conditions cut to those of them it has."""
    work = copy_repo(dest)
    if built is not None:
        seed_inputs(work, built)
        cfg = yaml.safe_load((work / config).read_text())
        for srv in cfg["servers"].values():
            srv["args"] = {**srv.get("args", {}), **EAGER}
            if conditions is not None:
                srv["conditions"] = [c for c in srv["conditions"] if c in conditions]
        for key in settings:
            assert key in cfg, f"{config} has no top-level {key}"
        cfg.update(settings)
        (work / config).write_text(yaml.safe_dump(cfg, sort_keys=False))
    snakemake(work, "--configfile", config, "--replace-workflow-config")
    return work


def snakemake(
    workdir: Path, *args: str, check: bool = True, timeout: float = 1800, cores: int = 1
) -> subprocess.CompletedProcess[str]:
    """Snakemake in ``workdir`` with the shared engine environments; on ``cores`` cores (its server jobs still run
    one at a time: each takes the one ``lorabench_device`` of profiles/default)."""
    proc = subprocess.run(
        [SNAKEMAKE, "--cores", str(cores), *args, "--config", f"env_root={ENV_ROOT}"],  # --config takes what follows
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        logs = failed_job_logs(workdir, proc.stderr)
        raise AssertionError(f"snakemake {args} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}{logs}")
    return proc


def failed_job_logs(workdir: Path, stderr: str, tail: int = 3000) -> str:
    """The end of each failed job's own log: what the job printed (a pip error, a server's last words) lands
    there, not in Snakemake's output."""
    parts = []
    for m in re.finditer(r"^\s+log: (.+?) \(check log file", stderr, re.M):
        for name in m.group(1).split(", "):
            path = workdir / name
            if path.is_file():
                parts.append(f"\n--- {name} (last {tail} characters) ---\n{path.read_text(errors='replace')[-tail:]}")
    return "".join(parts)


def planned(workdir: Path, *args: str) -> dict[str, int]:
    """Job name -> count that `snakemake -n` plans."""
    out = snakemake(workdir, "-n", *args).stdout
    if "Nothing to be done" in out:
        return {}
    table = out.split("Job stats:")[1].split("total")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def processes_naming(marker: str) -> list[str]:
    """Command lines of live processes (this one aside) that mention ``marker``, read from /proc: ``ps`` cuts long
    ones, such as a ``bash -c`` script's."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd:
                found.append(cmd)
    return found


def server_processes(marker: str) -> list[str]:
    """Command lines of live engine servers that mention ``marker`` (the study folder)."""
    return [cmd for cmd in processes_naming(marker) if any(m in cmd for m in all_server_markers())]


def wait_gone(marker: str, timeout: float = 60, find: Callable[[str], list[str]] = server_processes) -> list[str]:
    """What ``find`` (engine servers, by default) still lists for ``marker`` once it lists nothing or ``timeout``
    seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not find(marker):
            return []
        time.sleep(0.5)
    return find(marker)


def test_report_has_every_row_measured(study: Path):
    html = (study / "results/report/index.html").read_text()
    summary = read_json(study / "results/summary/summary.json")
    cfg = yaml.safe_load((study / "config/config.yaml").read_text())
    for sid, srv in cfg["servers"].items():
        for cond in srv["conditions"]:
            for burst in cfg["bursts"]:
                row = next(
                    r for r in summary["rows"] if (r["server"], r["condition"], r["burst"]) == (sid, cond, burst)
                )
                assert f'id="row-{sid}-{cond}-{burst}"' in html
                if cfg["engines"][srv["engine"]].get("requires_gpu"):
                    assert row["status"] == "not run: needs a GPU" and row.get("throughput_median") is None
                else:
                    assert row["status"] == "ok", row
                    assert cfg["repetitions"] <= row["throughput_n"] <= cfg["max_repetitions"]
                    assert row["reached_target"] == (row["throughput_ci_pct"] <= cfg["target_ci_pct"])
                    assert row["throughput_median"] > 0 and row["request_errors"] == 0
    assert "not run: needs a GPU" in html


def test_records_come_from_real_requests(study: Path):
    recs = list(read_jsonl(study / "results/servers/lora-2/records.jsonl"))
    assert recs and all(r["status"] == 200 and r["completion_tokens"] == 32 for r in recs)
    assert {r["model"] for r in recs} == {"tiny-qwen3", "a", "b", "c"}
    facts = read_json(study / "results/servers/lora-2/facts.json")
    assert facts["engine_version"] == "0.32.0" and facts["readiness_s"] > 0
    # `make test`'s workers ignore each other's servers (conftest.py): the job says so, and so does the report
    shared = os.environ.get(FOREIGN_SERVERS) == "ignore"
    assert facts.get("device_check") == (IGNORED if shared else None)
    html = (study / "results/report/index.html").read_text()
    assert ("measured beside other runs" in html) == shared
    assert facts["log"]["kv_cache_tokens"] > 0
    assert facts["probes"]["wrong_model_status"] == 404 and facts["probes"]["models_listed_ok"]
    # Every request of the run carried the job's API key; the same request without it is refused.
    assert facts["api_key_required"] and facts["probes"]["no_key_status"] == 401
    # The canary ran before anything was measured: each adapter changes the output.
    assert all(a["differs"] for a in facts["probes"]["canary"]["adapters"].values())
    assert set(facts["probes"]["canary"]["adapters"]) == {"a", "b", "c"}


def test_api_key_never_written(study: Path):
    for f in [*study.glob("results/**/*.log"), *study.glob("results/**/*.json"), *study.glob("logs/**/*.log")]:
        text = f.read_text(errors="replace")
        assert "VLLM_API_KEY" not in text and "Bearer " not in text, f


def test_runtime_load_measured(study: Path):
    load = read_json(study / "results/runtime_load/lora-2/load.json")
    assert load["status"] == "ok" and load["load_ok"] and load["unlisted_path_refused"]
    assert all(c["request_after_unload_status"] == 404 for c in load["cycles"])
    # vLLM forgets an unloaded adapter: gone from /v1/models, and no request loads it again
    assert load["unload_ok"] and not load["reloads_on_request"]
    assert load["max_cpu_loras_probe"]["refused"]


def test_no_server_survives_the_run(study: Path):
    assert server_processes(str(study)) == []
    assert not list(study.glob("results/**/*.pid"))


def test_bundle_of_another_study_holds_that_studys_config(study: Path, tmp_path: Path):
    def edit(d: Path) -> None:
        cfg = yaml.safe_load((d / "config/config.yaml").read_text())
        cfg["study"] = "my-study"
        (d / "my-study.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    w = edited_copy(study, tmp_path / "w", edit)
    snakemake(w, "--configfile", "my-study.yaml", "--replace-workflow-config")
    with tarfile.open(w / "results/bundle/my-study.tar.gz") as tar:
        names = tar.getnames()
        merged = yaml.safe_load(tar.extractfile("my-study/results/bundle/config/merged.yaml").read())
    assert "my-study/results/bundle/config/loaded/0-my-study.yaml" in names
    assert not [n for n in names if n.endswith("config/config.yaml")]
    assert merged["study"] == "my-study" and merged["env_root"] == ENV_ROOT  # --config overrides included


def test_nothing_to_do_after_a_complete_run(study: Path):
    assert planned(study) == {}


def test_bundle_verifies_and_rerenders(study: Path, tmp_path: Path):
    bundle = study / "results/bundle/cpu-default.tar.gz"
    assert verify_bundle(bundle) == []
    html = render_from_bundle(bundle, tmp_path / "re", ROOT)
    assert "lorabench report" in html.read_text()
    # One modified file: verification fails naming it.
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bundle) as src, tarfile.open(bad, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if m.name.endswith("results/summary/summary.csv"):
                data = data.replace(b",", b";", 1)
                m.size = len(data)
            import io

            dst.addfile(m, io.BytesIO(data))
    assert verify_bundle(bad) == ["modified: results/summary/summary.csv"]
    cli = subprocess.run(
        [sys.executable, "-m", "lorabench.cli", "bundle", "verify", str(bad)], capture_output=True, text=True
    )
    assert cli.returncode == 1 and "results/summary/summary.csv" in cli.stderr


def edited_copy(study: Path, dest: Path, edit) -> Path:
    """A copy of the finished study (results and snakemake's metadata included) with one edit applied."""
    shutil.copytree(study, dest, symlinks=True)
    edit(dest)
    return dest


def test_engine_version_bump_plans_only_that_engine(study: Path, tmp_path: Path):
    def bump(d: Path) -> None:
        p = d / "config/config.yaml"
        p.write_text(p.read_text().replace('version: "0.32.0"', 'version: "0.32.1"'))

    jobs = planned(edited_copy(study, tmp_path / "w", bump))
    assert jobs == {
        "engine_env": 1,
        "group_loadtest": 1,  # the session's study has lora-off and lora-2, in one group (conftest.study)
        "group_member": 2,
        "runtime_load": 1,
        "summary_aggregate": 1,
        "queues_summary": 1,
        "claims_evaluate": 1,
        "report_render": 1,
        "bundle_archive": 1,
        "all": 1,
    }


def test_server_edit_plans_only_that_servers_job(study: Path, tmp_path: Path):
    """lora-off's settings edited: its job (the group it is measured in, whose pairs need both members measured
    together) and what reads the servers' files run again; not the runtime loading of the other member."""

    def edit(d: Path) -> None:
        p = d / "config/config.yaml"
        text = p.read_text()
        i = text.index("  lora-off:")
        p.write_text(text[:i] + text[i:].replace("max_model_len: 512", "max_model_len: 384", 1))

    jobs = planned(edited_copy(study, tmp_path / "w", edit))
    assert jobs == {
        "group_loadtest": 1,
        "group_member": 2,
        "summary_aggregate": 1,
        "queues_summary": 1,
        "claims_evaluate": 1,
        "report_render": 1,
        "bundle_archive": 1,
        "all": 1,
    }


def test_template_edit_plans_only_report_and_bundle(study: Path, tmp_path: Path):
    def edit(d: Path) -> None:
        p = d / "report/templates/sections/header.html.j2"
        p.write_text(p.read_text().replace("<h1>", "<h1 class='t'>"))

    w = edited_copy(study, tmp_path / "w", edit)
    assert planned(w) == {"report_render": 1, "bundle_archive": 1, "all": 1}
    snakemake(w)
    assert "<h1 class='t'>" in (w / "results/report/index.html").read_text()
    assert server_processes(str(w)) == []
