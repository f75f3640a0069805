"""The machine-time estimate of a study (tools/estimate_study.py), calibrated on the committed H200 jobs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from .conftest import ROOT

TOOL = [sys.executable, str(ROOT / "tools/estimate_study.py")]


def estimate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOOL, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def minutes(out: str, job: str) -> tuple[float, float]:
    m = re.search(rf"^{re.escape(job)}\s+\S+\s+([\d.]+)-([\d.]+)", out, re.M)
    assert m, out
    return float(m.group(1)), float(m.group(2))


def test_calibrated_estimate_brackets_what_the_saved_job_took():
    proc = estimate("config/gpu-h200-both.yaml", "--from", "studies/h200-both")
    assert proc.returncode == 0, proc.stderr
    lo, hi = minutes(proc.stdout, "sglang-lora-2")
    # the saved sglang-lora-2 job ran 716.7 s (facts.json timing.total_s) with the config's settings
    assert lo < 716.7 / 60 < hi
    assert "(defaults)" not in proc.stdout and "15 cells x 10-14 measurements of >= 2.5 s" in proc.stdout


def test_left_counts_only_jobs_not_saved_with_the_current_settings():
    proc = estimate("config/gpu-h200-both.yaml", "--from", "studies/h200-both", "--left", "studies/h200-both")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^sglang-lora-2\s+sglang\s+done", proc.stdout, re.M)
    minutes(proc.stdout, "vllm-lora-2")  # measured with the earlier settings: to be run again
    assert "total left" in proc.stdout


def test_without_finished_jobs_the_defaults_are_named_and_a_bad_engine_is_refused():
    proc = estimate("config/studies/slot-queues.yaml")
    assert proc.returncode == 0 and "(defaults)" in proc.stdout
    bad = estimate("config/gpu-h200-both.yaml", "--engines", "vlm")
    assert bad.returncode == 2 and "--engines vlm: not an engine" in bad.stderr


def test_targets_list_what_a_stretch_runs_in_order_with_its_high_estimate(tmp_path):
    # the committed study with its SGLang 4-slot job and every vLLM job not saved yet
    left = tmp_path / "h200-both"
    shutil.copytree(ROOT / "studies/h200-both", left, ignore=shutil.ignore_patterns("report", "summary", "*.gz"))
    for job in ("servers/sglang-lora-4", "servers/vllm-lora-off", "servers/vllm-lora-2", "runtime_load/vllm-lora-2"):
        shutil.rmtree(left / job, ignore_errors=True)
    proc = estimate("config/gpu-h200-both.yaml", "--from", "studies/h200-both", "--left", str(left), "--targets")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    targets = [t for t, _ in rows]
    # saved with the current settings: not listed; SGLang first, LoRA off before slots, side job after its server
    assert "results/servers/sglang-lora-2/facts.json" not in targets
    assert targets.index("results/servers/sglang-lora-4/facts.json") < targets.index(
        "results/servers/vllm-lora-off/facts.json"
    )
    assert (
        targets.index("results/servers/vllm-lora-off/facts.json")
        < targets.index("results/servers/vllm-lora-2/facts.json")
        < targets.index("results/runtime_load/vllm-lora-2/load.json")
        < targets.index("results/servers/vllm-lora-4/facts.json")
    )
    assert all(int(s) > 60 for _, s in rows)
