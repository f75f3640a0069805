"""Saved jobs of a study measured in stretches: what is put back and what is measured again."""

from __future__ import annotations

import copy
import gzip
import json
import sys
from pathlib import Path

import pytest

from lorabench.config import load_file
from lorabench.job import RuntimeLoad, server_job
from lorabench.runtime_load import load_result

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dev"))
import study_results  # noqa: E402

DEFAULT = load_file(ROOT / "config" / "config.yaml")


def _server(results: Path, cfg: dict, name: str) -> None:
    job = server_job(cfg, name, hardware="")
    d = results / "servers" / name
    d.mkdir(parents=True)
    facts = {"server": name, "status": "ok", "measurement": job.measurement_facts(), "config": job.facts_config()}
    (d / "facts.json").write_text(json.dumps(facts))
    (d / "measurements.jsonl").write_text('{"throughput_tok_s": 1.0}\n')
    (d / "metrics.jsonl").write_text("")
    (d / "server.log").write_text("ready\n")
    (d / "records.jsonl").write_text('{"ttft_s": 0.0123456789, "itl_s": [0.001234567]}\n')


def _load(results: Path, name: str, checked: bool) -> None:
    d = results / "runtime_load" / name
    d.mkdir(parents=True)
    load = {"status": "ok", "server": name, "cycles": [{"listed_after_unload": False} if checked else {}]}
    (d / "load.json").write_text(json.dumps(load))
    (d / "server.log").write_text("ready\n")
    (d / "records.jsonl").write_text("{}\n")


def test_save_then_restore_round_trips_and_rounds_records(tmp_path: Path):
    cfg = copy.deepcopy(DEFAULT)
    name = sorted(cfg["servers"])[0]
    _server(tmp_path / "r", cfg, name)
    assert study_results.save(tmp_path / "r", tmp_path / "s") == [f"servers/{name}"]
    with gzip.open(tmp_path / "s/servers" / name / "records.jsonl.gz", "rt") as f:
        assert json.loads(f.read()) == {"itl_s": [0.0012], "ttft_s": 0.012346}
    assert study_results.restore(tmp_path / "s", tmp_path / "back", cfg) == [f"servers/{name}"]
    assert (tmp_path / "back/servers" / name / "server.log").read_text() == "ready\n"


def test_measurements_are_saved_gzipped_reproducibly_and_an_older_plain_save_restores_alike(tmp_path: Path):
    cfg = copy.deepcopy(DEFAULT)
    name = sorted(cfg["servers"])[0]
    _server(tmp_path / "r", cfg, name)
    saved = tmp_path / "s/servers" / name
    saved.mkdir(parents=True)
    (saved / "measurements.jsonl").write_text("")  # a placeholder published before the job ran: it goes
    study_results.save(tmp_path / "r", tmp_path / "s")
    assert sorted(p.name for p in saved.iterdir()) == [
        "facts.json", "measurements.jsonl.gz", "metrics.jsonl.gz", "records.jsonl.gz", "server.log.gz"
    ]  # fmt: skip
    first = {p.name: p.read_bytes() for p in saved.iterdir()}
    assert first["measurements.jsonl.gz"][4:8] == bytes(4)  # no time in the header
    study_results.save(tmp_path / "r", tmp_path / "s")  # saved again: the same bytes
    assert {p.name: p.read_bytes() for p in saved.iterdir()} == first
    # a job saved before measurements were kept gzipped
    with gzip.open(saved / "measurements.jsonl.gz", "rb") as f:
        (saved / "measurements.jsonl").write_bytes(f.read())
    (saved / "measurements.jsonl.gz").unlink()
    assert study_results.restore(tmp_path / "s", tmp_path / "back", cfg) == [f"servers/{name}"]
    for f in ("measurements.jsonl", "metrics.jsonl", "server.log", "facts.json"):
        assert (tmp_path / "back/servers" / name / f).read_bytes() == (tmp_path / "r/servers" / name / f).read_bytes()


def test_a_job_measured_with_other_settings_is_measured_again(tmp_path: Path, capsys):
    cfg = copy.deepcopy(DEFAULT)
    name = sorted(cfg["servers"])[0]
    _server(tmp_path / "r", cfg, name)
    study_results.save(tmp_path / "r", tmp_path / "s")
    cfg["repetitions"] = cfg.get("repetitions", 3) + 1
    cfg["max_repetitions"] = max(cfg.get("max_repetitions", 0), cfg["repetitions"])
    assert study_results.restore(tmp_path / "s", tmp_path / "back", cfg) == []
    assert f"left out servers/{name}: measured with" in capsys.readouterr().out
    # without a config everything saved comes back (to publish what exists)
    assert study_results.restore(tmp_path / "s", tmp_path / "all") == [f"servers/{name}"]


def test_a_runtime_load_from_before_the_unload_check_is_measured_again(tmp_path: Path, capsys):
    cfg = copy.deepcopy(DEFAULT)
    _load(tmp_path / "r", "old", checked=False)
    _load(tmp_path / "r", "new", checked=True)
    study_results.save(tmp_path / "r", tmp_path / "s")
    assert study_results.restore(tmp_path / "s", tmp_path / "back", cfg) == ["runtime_load/new"]
    assert "left out runtime_load/old: measured before unloads were checked" in capsys.readouterr().out


def _cycle(k: int, load_status: int, listed_after_unload: bool, reloaded: bool) -> dict:
    figs = {f"{g}_{f}_ms": 1.0 for g in ("cold", "warm", "resident") for f in ("ttft", "latency")}
    return {"cycle": k, "load_s": 0.01, "unload_s": 0.01, "load_status": load_status, "load_body": "",
            "unload_status": 200, "listed_after_unload": listed_after_unload, "reloaded_by_request": reloaded,
            **figs}  # fmt: skip


def test_load_result_says_whether_unloads_held():
    rl = RuntimeLoad(adapter="c", repeats=2, warmed_requests=1, burst=1)
    gone = load_result([_cycle(0, 200, False, False), _cycle(1, 200, False, False)], rl, "a", True)
    assert gone["load_ok"] and gone["unload_ok"] and not gone["reloads_on_request"]
    # an engine that loads the adapter again for the next request naming it (SGLang 0.5.17)
    back = load_result([_cycle(0, 200, False, True), _cycle(1, 200, False, True)], rl, "a", True)
    assert back["load_ok"] and back["unload_ok"] and back["reloads_on_request"]
    # an unload that left the adapter listed: the next load is refused and times nothing
    kept = [_cycle(0, 200, True, False), {**_cycle(1, 400, True, False), "load_s": 9.0, "load_body": "already"}]
    kept_r = load_result(kept, rl, "a", True)
    assert not kept_r["load_ok"] and not kept_r["unload_ok"] and kept_r["loads_ok"] == 1
    assert kept_r["load_s_median"] == 0.01 and kept_r["load_errors"] == ["already"]


def _pack(save_dir: Path, poll: Path, kind: str, name: str) -> None:
    """A job archive as engine_stretch.sh pack writes it: KIND-NAME.tgz holding NAME/."""
    import tarfile

    with tarfile.open(poll / f"{kind}-{name}.tgz", "w:gz") as tar:
        tar.add(save_dir / kind / name, arcname=name)


def test_take_puts_a_loans_jobs_records_and_machine_into_the_study(tmp_path: Path):
    import tarfile

    results, save_dir, poll, study = (tmp_path / d for d in ("results", "save", "poll", "study"))
    _server(results, DEFAULT, "lora-2")
    study_results.save(results, save_dir)
    poll.mkdir()
    _pack(save_dir, poll, "servers", "lora-2")
    work = tmp_path / "w"
    files = {"results/envs/vllm-cpu.json": "{}", "results/envs/vllm-cpu.freeze.txt": "vllm==0.32.0\n",
             "results/model/manifest.json": "{}", "results/adapters/a.json": "{}",
             "logs/server_loadtest/lora-2.log": "cycle 1 done\n", "logs/server_loadtest/lora-4.log": "other\n",
             "logs/model_build.log": "built\n"}  # fmt: skip
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    (work / "machine.txt").write_text("boot_id abc\n")
    with tarfile.open(poll / "meta.tgz", "w:gz") as tar:  # as pack writes it since loan 14: the machine inside
        for top in ("results", "logs", "machine.txt"):
            tar.add(work / top, arcname=top)
    (study / "servers" / "lora-2").mkdir(parents=True)
    (study / "servers" / "lora-2" / "stale.txt").write_text("from an earlier poll")

    assert study_results.take(poll, study, "5") == ["servers/lora-2"]
    assert not (study / "servers" / "lora-2" / "stale.txt").exists()  # replaced whole, not merged
    assert (study / "servers" / "lora-2" / "measurements.jsonl.gz").exists()
    restored = study_results.restore(study, tmp_path / "again")
    assert restored == ["servers/lora-2"]
    assert (study / "envs" / "vllm-cpu.freeze.txt").read_text() == "vllm==0.32.0\n"
    assert (study / "model" / "manifest.json").exists() and (study / "adapters" / "a.json").exists()
    assert (study / "logs" / "server_loadtest" / "lora-2.log").exists()
    assert not (study / "logs" / "server_loadtest" / "lora-4.log").exists()  # a job not taken: its log neither
    assert not (study / "logs" / "model_build.log").exists()
    assert (study / "machine-loan5.txt").read_text() == "boot_id abc\n"


def test_take_refuses_an_archive_that_is_not_a_job_before_writing_anything(tmp_path: Path):
    import tarfile

    poll, study = tmp_path / "poll", tmp_path / "study"
    poll.mkdir()
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f.txt").write_text("")
    with tarfile.open(poll / "servers-lora-2.tgz", "w:gz") as tar:
        tar.add(tmp_path / "x", arcname="x")  # holds x/, not lora-2/
    with pytest.raises(SystemExit, match="servers-lora-2.tgz: not a job archive"):
        study_results.take(poll, study, "1")
    assert not study.exists()
