"""The machine-time estimate of a study (tools/estimate_study.py), calibrated on the committed H200 jobs: the files
of theirs the estimate reads, cut from their records into tests/fixtures/estimate/ (``STUDIES``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import yaml

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

from estimate_study import slots  # noqa: E402

TOOL = [sys.executable, str(ROOT / "tools/estimate_study.py")]
STUDIES = "tests/fixtures/estimate"  # one folder per study, as the study kept its jobs (relative to ROOT)


def estimate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOOL, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def minutes(out: str, job: str) -> tuple[float, float]:
    m = re.search(rf"^{re.escape(job)}\s+\S+\s+([\d.]+)-([\d.]+)", out, re.M)
    assert m, out
    return float(m.group(1)), float(m.group(2))


def test_calibrated_estimate_brackets_what_the_saved_job_took():
    proc = estimate("config/gpu-h200-8b.yaml", "--from", f"{STUDIES}/h200-8b")
    assert proc.returncode == 0, proc.stderr
    # the saved jobs ran 208.9, 419.3, 407.3, 424.9 and 170.0 s (facts.json timing.total_s) with the config's settings
    # (sglang-lora-4, 304.6 s, was the machine's second SGLang server: ready in 65 s instead of 146 s, under the
    # estimate, which takes every start as a first one)
    jobs = (("vllm-lora-off", 208.9), ("vllm-lora-2", 419.3), ("vllm-lora-4", 407.3), ("sglang-lora-2", 424.9),
            ("sglang-lora-off", 170.0))  # fmt: skip
    for job, took in jobs:
        lo, hi = minutes(proc.stdout, job)
        assert 0.95 * lo < took / 60 < hi, (job, lo, hi)
    assert re.search(r"^vllm-lora-4 .* 24 cells x 9 cycles of ~2\d s$", proc.stdout, re.M), proc.stdout
    for job in ("vllm-lora-2-runtime", "sglang-lora-2-runtime"):  # timed from the saved ones
        assert re.search(rf"^{job} .*runtime loading$", proc.stdout, re.M), proc.stdout


def test_left_counts_only_jobs_not_saved_with_the_current_settings(tmp_path):
    # the committed study with vLLM's runtime-loading job not measured yet
    left = tmp_path / "h200-8b"
    shutil.copytree(ROOT / STUDIES / "h200-8b", left, ignore=shutil.ignore_patterns("report", "summary", "*.gz"))
    (left / "runtime_load/vllm-lora-2/load.json").write_text('{"engine": "vllm", "status": "not measured yet"}')
    proc = estimate("config/gpu-h200-8b.yaml", "--from", f"{STUDIES}/h200-8b", "--left", str(left))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^vllm-lora-2\s+vllm\s+done", proc.stdout, re.M)
    assert re.search(r"^sglang-lora-2-runtime\s+sglang\s+done", proc.stdout, re.M)
    lo, hi = minutes(proc.stdout, "vllm-lora-2-runtime")  # not measured yet
    assert 0 < lo <= hi and "total left" in proc.stdout
    # server jobs saved with method v1 are measured again under the current settings; runtime loading is kept
    v1 = tmp_path / "h200-vllm"  # method v1's server jobs, beside a runtime-loading job of today's layout
    shutil.copytree(ROOT / STUDIES / "h200-vllm", v1, ignore=shutil.ignore_patterns("report", "summary", "*.gz"))
    (v1 / "runtime_load/vllm-lora-2").mkdir(parents=True)
    shutil.copy(ROOT / STUDIES / "h200-1.7b/runtime_load/vllm-lora-2/load.json", v1 / "runtime_load/vllm-lora-2")
    old = estimate("config/gpu-h200.yaml", "--from", f"{STUDIES}/h200-8b", "--left", str(v1))
    assert old.returncode == 0 and not re.search(r"^\S+-lora-(off|2|4)\s+\S+\s+done", old.stdout, re.M)
    assert re.search(r"^vllm-lora-2-runtime\s+vllm\s+done", old.stdout, re.M)


def test_without_finished_jobs_the_defaults_are_named_and_a_bad_engine_is_refused():
    proc = estimate("config/studies/slot-queues.yaml")
    assert proc.returncode == 0 and "(defaults)" in proc.stdout
    bad = estimate("config/gpu-h200-both.yaml", "--engines", "vlm")
    assert bad.returncode == 2 and "--engines vlm: not an engine" in bad.stderr


def test_targets_list_what_a_stretch_runs_in_order_with_its_high_estimate(tmp_path):
    # the committed study with one vLLM job taken out, and no SGLang job saved yet
    left = tmp_path / "h200-8b"
    shutil.copytree(ROOT / STUDIES / "h200-8b", left, ignore=shutil.ignore_patterns("report", "summary", "*.gz"))
    for job in ("vllm-lora-2", "sglang-lora-off", "sglang-lora-2", "sglang-lora-4"):
        shutil.rmtree(left / "servers" / job)
    shutil.rmtree(left / "runtime_load/sglang-lora-2")
    shutil.rmtree(left / "runtime_load/vllm-lora-2")
    proc = estimate("config/gpu-h200-8b.yaml", "--from", f"{STUDIES}/h200-8b", "--left", str(left), "--targets")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    targets = [t for t, _ in rows]
    # saved with the current settings: not listed; SGLang first, LoRA off before slots, side job after its server
    assert "results/servers/vllm-lora-4/facts.json" not in targets
    assert targets.index("results/servers/sglang-lora-4/facts.json") < targets.index(
        "results/servers/vllm-lora-2/facts.json"
    )
    assert (
        targets.index("results/servers/sglang-lora-off/facts.json")
        < targets.index("results/servers/sglang-lora-2/facts.json")
        < targets.index("results/runtime_load/sglang-lora-2/load.json")
        < targets.index("results/servers/sglang-lora-4/facts.json")
    )
    assert targets.index("results/servers/vllm-lora-2/facts.json") < targets.index(
        "results/runtime_load/vllm-lora-2/load.json"
    )
    assert all(int(s) > 60 for _, s in rows)


def test_bursts_of_long_prompts_time_only_the_cells_that_send_them():
    # prefill-decode-h200 timed 2-4k-token prompts with 16-token outputs beside the short prompt's: adding
    # it moves the estimate of a short-prompt study by little, and it times its own long-prompt cells
    alone = estimate("config/gpu-h200-8b.yaml", "--from", f"{STUDIES}/h200-8b")
    both = estimate("config/gpu-h200-8b.yaml", "--from", f"{STUDIES}/h200-8b", f"{STUDIES}/prefill-decode-h200")
    for job in ("vllm-lora-4", "sglang-lora-2"):
        (lo1, hi1), (lo2, hi2) = minutes(alone.stdout, job), minutes(both.stdout, job)
        assert abs(hi2 - hi1) <= 0.1 * hi1 and abs(lo2 - lo1) <= 0.1 * lo1, (job, alone.stdout, both.stdout)
    own = estimate("config/studies/prefill-decode-h200.yaml", "--from", f"{STUDIES}/prefill-decode-h200")
    lo, hi = minutes(own.stdout, "vllm-lora-4")
    assert lo <= 462 / 60 * 1.1 and hi >= 462 / 60 * 0.95  # the saved job took 461.9 s (facts timing.total_s)


def test_studies_of_another_model_are_left_out_where_some_measured_this_one():
    # the rank sweep (Qwen3-8B shape) was once put at ~14 s a cycle from the 8B's and the 1.7B's jobs pooled; on an
    # H100 its 28-cell cycle took 35 s, and from the 8B's jobs alone it is put at ~26
    alone = estimate("config/studies/rank-sweep.yaml", "--from", f"{STUDIES}/h200-8b", "--engines", "vllm")
    mixed = estimate("config/studies/rank-sweep.yaml", "--from", f"{STUDIES}/h200-8b", f"{STUDIES}/h200-1.7b",
                     "--engines", "vllm")  # fmt: skip
    table = lambda out: out[out.index("job ") :]  # noqa: E731 - the table after the notes
    assert table(mixed.stdout) == table(alone.stdout)
    assert (
        f"note: {STUDIES}/h200-1.7b measured config/models/qwen3-1.7b.json" in mixed.stdout
        and "left out" in mixed.stdout
    )
    # with no study of this model, every one counts and the note says to take the high figure
    other = estimate("config/studies/rank-sweep.yaml", "--from", f"{STUDIES}/h200-1.7b", "--engines", "vllm")
    assert (
        "times sglang with LoRA off, sglang with LoRA, vllm with LoRA off, vllm with LoRA "
        "(no study of this model did): take the high figure" in other.stdout
    ), other.stdout
    assert f"timings from {STUDIES}/h200-1.7b" in other.stdout


def test_a_lora_server_is_timed_from_lora_servers_before_its_models_lora_off_one(tmp_path):
    # SGLang's 32-slot server of the Llama-2-7B shape, timed from that shape's LoRA-off job alone, was put at 7.9-8.0
    # minutes; in loan 15 (an H100) it was ready after 127 s and warmed up after 115 s more, and its ninth cycle of
    # 30 cells ended 11.7 minutes after the job began (cycles of about 50 s: the tenth, the last, due at about 12.5,
    # when the device time ran out). The Qwen3-8B shape's LoRA servers time it; the 7B's LoRA-off job still times
    # the 7B's LoRA-off server. The study as it was then: its folder without the 32-slot job loan 17 added.
    before = tmp_path / "llama2-7b-rank16-h100"
    shutil.copytree(ROOT / STUDIES / "llama2-7b-rank16-h100", before)
    shutil.rmtree(before / "servers/sglang-lora-32")
    proc = estimate("config/studies/llama2-7b-rank16.yaml", "--from", str(before), f"{STUDIES}/rank-sweep-h100",
                    "--engines", "sglang")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lo, hi = minutes(proc.stdout, "sglang-lora-32")
    assert hi > 12.5 and lo < 12.5 * 1.2, proc.stdout
    assert "times sglang with LoRA (no study of this model did)" in proc.stdout
    own = estimate("config/studies/llama2-7b-rank16.yaml", "--from", str(before), "--engines", "sglang")
    assert minutes(own.stdout, "sglang-lora-off") == minutes(proc.stdout, "sglang-lora-off"), own.stdout
    assert minutes(own.stdout, "sglang-lora-32")[1] < 12.5  # the LoRA-off job alone: too hopeful
    # loan 17's 32-slot job (733.6 s, facts.json timing.total_s) times it from now on, and its estimate brackets it
    now = estimate("config/studies/llama2-7b-rank16.yaml", "--from", f"{STUDIES}/llama2-7b-rank16-h100", "--engines",
                   "sglang")  # fmt: skip
    lo, hi = minutes(now.stdout, "sglang-lora-32")
    assert lo <= 733.6 / 60 <= hi, now.stdout
    assert "no study of this model did" not in now.stdout


def test_a_burst_that_waits_for_slots_is_timed_by_its_rounds(tmp_path):
    # many-adapters: a burst of 48 over 128 adapters passes 8 slots in 6 rounds and 2 slots in 21; the estimate
    # once timed every burst of 48 alike (24-29 minutes for vLLM's four servers where their rounds take 62-68)
    cfg = yaml.safe_load((ROOT / "config/studies/many-adapters.yaml").read_text())
    cfg["servers"] = {
        name: {**cfg["servers"]["vllm-ml8-cache128"], "max_loras": slots, "conditions": conds}
        for name, slots, conds in (
            ("one", 8, ["base", "n8-uniform"]),
            ("six", 8, ["base", "n128-uniform"]),
            ("many", 2, ["base", "n128-uniform"]),
        )  # fmt: skip
    }
    path = tmp_path / "rounds.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = estimate(str(path), "--from", f"{STUDIES}/h200-8b").stdout
    cycle = {
        job: float(re.search(rf"^{job} .* cycles of ~(\d+) s$", out, re.M).group(1)) for job in ("one", "six", "many")
    }
    assert cycle["six"] > 2.5 * cycle["one"], out  # 1 + 5.9 rounds' worth against 1 + 1.2
    assert cycle["many"] > 2.5 * cycle["six"], out  # 21 rounds against 6


def test_a_warm_up_that_waits_for_slots_is_timed_per_round():
    # vLLM's 2-slot job of many-adapters-h100 took 441.4 s (facts.json timing.total_s; its warm-up 50 s over bursts
    # of 8 adapters and of Zipf 1.5 over 32, four and five rounds each) and the 32-slot job 588.8 s. The warm-up
    # was timed per cell, not per round, and the estimate then multiplied it by each cell's rounds: 8.2-8.6
    # minutes for the 2-slot job, from its own timings.
    proc = estimate("config/studies/many-adapters.yaml", "--from", f"{STUDIES}/many-adapters-h100", "--engines", "vllm")
    assert proc.returncode == 0, proc.stderr
    for job, took in (("vllm-ml2-cache128", 441.4), ("vllm-ml32-cache128", 588.8)):
        lo, hi = minutes(proc.stdout, job)
        assert 0.95 * lo < took / 60 < hi, (job, lo, hi)


def test_unset_slots_are_the_engines_own_default():
    # a LoRA server without max_loras runs with the engine's default: vLLM 1 (--max-loras), SGLang 8
    # (--max-loras-per-batch), where SGLang's base-model requests in a LoRA batch take a slot too
    assert slots("vllm", True, None) == (1, False)
    assert slots("sglang", True, None) == (8, True)
    assert slots("vllm", True, 4) == (4, False)
    assert slots("sglang", False, 4) == (None, False)  # LoRA off: no slots to wait for
    assert slots("not-an-engine", True, 2) == (2, False)
