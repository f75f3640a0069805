"""dev/engine_stretch.sh launch: the call that completes the kit neither waits for inputs nobody is preparing nor
starts a run whose preparation (or start) failed; targets: the jobs a start would run, listed before a loan."""

from __future__ import annotations

import os
import subprocess
import time

from .conftest import ROOT
from .test_pipeline_e2e import processes_naming, wait_gone

SCRIPT = ROOT / "dev/engine_stretch.sh"


# A launch's wait, where a test checks that it does not wait it out: "at once" is then well under a tenth of it,
# however busy the host (no fixed bound of a few seconds, which a busy 2-core host can exceed).
WAIT_S = 600


def script(*args, timeout=60, **env):
    """``bash dev/engine_stretch.sh ARGS`` from the checkout, ``env`` added to the environment; (result, seconds)."""
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
        timeout=timeout,
    )
    return proc, time.monotonic() - t0


def launch(es, out, seconds=WAIT_S, *queued, config="config/studies/llama2-7b-rank16.yaml"):
    """``launch`` with ES=es, its runs queued behind it (``after``) named by ``queued``; (result, seconds taken)."""
    return script("launch", config, "vllm", seconds, out, *queued, ES=str(es), timeout=seconds + 60)


def wait_for(path, text, timeout=120):
    """Wait until the file at ``path`` holds ``text`` (a watcher in the background writes it), at most ``timeout``
    seconds."""
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert time.monotonic() < deadline, f"{path} never said {text!r}"
        time.sleep(0.5)


def test_launch_gives_up_at_once_when_nothing_is_being_prepared(tmp_path):
    # loan 6's first batch: the prepare call got no machine, and the starting call waited 450 s on the next one
    proc, took = launch(tmp_path / "es", tmp_path / "out")
    assert proc.returncode == 8
    assert "nothing is being prepared" in proc.stdout
    assert took < WAIT_S / 10
    assert not (tmp_path / "es" / "driver.pid").exists()


def test_launch_starts_nothing_after_a_failed_prepare(tmp_path):
    es = tmp_path / "es"
    es.mkdir()
    (es / "steps.log").write_text("STEP prepare config/studies/llama2-7b-rank16.yaml 03:28:27\nSTEP FAILED prepare\n")
    proc, took = launch(es, tmp_path / "out")
    assert proc.returncode == 6
    assert took < WAIT_S / 10
    assert not (es / "driver.pid").exists()


def test_launch_waits_for_the_inputs_of_the_runs_queued_behind_it(tmp_path):
    # the second study's model and adapters build before the first job starts, not beside a measurement
    es, es2 = tmp_path / "es", tmp_path / "es2"
    es.mkdir()
    (es / "steps.log").write_text("STEP prepare a.yaml 03:28:27\nSTEP prepared 03:29:39\n")
    proc, _ = launch(es, tmp_path / "out", 4, es2)
    assert not (es / "driver.pid").exists(), proc.stdout + proc.stderr
    # the watcher goes on waiting; a failed prepare ends it without a start
    with open(es / "steps.log", "a") as f:
        f.write("STEP FAILED prepare\n")
    wait_for(es / "launch.log", "prepare failed: nothing started")
    assert not (es / "driver.pid").exists()


def test_a_second_launch_waits_for_the_new_run_not_the_finished_one(tmp_path):
    # loan 8b: with the inputs built and the first run done, a second launch ran one more job; the first run's
    # pidfile, left behind, must not pass for the new run's, or the call comes back at once with nothing
    es = tmp_path / "es"
    es.mkdir()
    # a second study's inputs still building (queued es2): the new run waits for them, so it has not started yet
    (es / "steps.log").write_text("STEP prepare a.yaml 16:30:09\nSTEP prepared 16:31:49\nSTEP DONE 16:48:53\n")
    dead = subprocess.Popen(["true"])
    dead.wait()
    (es / "driver.pid").write_text(f"{dead.pid}\n")
    proc, took = launch(es, tmp_path / "out", 4, tmp_path / "es2")
    assert took >= 4, proc.stdout + proc.stderr  # it waited for the new run to start, not the old one's pidfile
    assert not (es / "driver.pid").exists()
    with open(es / "steps.log", "a") as f:  # ends the watcher without a start
        f.write("STEP FAILED prepare\n")
    wait_for(es / "launch.log", "prepare failed: nothing started")
    assert not (es / "driver.pid").exists()


def test_launch_starts_nothing_while_a_run_still_goes(tmp_path):
    es = tmp_path / "es"
    es.mkdir()
    (es / "steps.log").write_text("STEP prepare a.yaml 16:30:09\nSTEP prepared 16:31:49\n")
    running = subprocess.Popen(["sleep", "30"])
    try:
        (es / "driver.pid").write_text(f"{running.pid}\n")
        proc, took = launch(es, tmp_path / "out")
        assert proc.returncode == 7
        assert "a run is still going" in proc.stdout
        assert took < WAIT_S / 10
        assert (es / "driver.pid").read_text().split()[0] == str(running.pid)
    finally:
        running.kill()
        running.wait()


def targets(config, engine, **env):
    proc, _ = script("targets", config, engine, **env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_targets_lists_the_jobs_start_would_run_in_its_order():
    # loan 10's recipes, checked before the loan: servers by slot count, ONLY keeping some, LAST moving some last
    many = "config/studies/many-adapters.yaml"
    servers = [t.split("/")[2] for t in targets(many, "vllm")]
    assert servers == ["vllm-ml2-cache128", "vllm-ml8-cache128", "vllm-ml8-cache8", "vllm-ml32-cache128"]
    batch = [t.split("/")[2] for t in targets(many, "vllm", LAST="/vllm-ml(2-|8-cache8)")]
    assert batch == ["vllm-ml8-cache128", "vllm-ml32-cache128", "vllm-ml2-cache128", "vllm-ml8-cache8"]
    short = targets(many, "vllm", ONLY="/vllm-ml(32-|8-cache128/)", LAST="/vllm-ml8-cache128/")
    assert short == ["results/servers/vllm-ml32-cache128/facts.json", "results/servers/vllm-ml8-cache128/facts.json"]


def test_targets_of_a_config_that_does_not_load_fail():
    proc, _ = script("targets", "config/studies/no-such-study.yaml", "vllm")
    assert proc.returncode == 6 and proc.stdout.strip() == "" and "no-such-study.yaml" in proc.stderr


def test_a_launch_whose_start_fails_comes_back_at_once(tmp_path):
    # a second launch on a warm machine after a run with a failed job: that earlier failure neither ends the wait
    # nor hides this launch's own; a start that cannot read its config says so and the call does not wait it out
    es = tmp_path / "es"
    es.mkdir()
    (es / "steps.log").write_text(
        "STEP prepare c 01:00:00\nSTEP prepared 01:00:01\nSTEP FAILED results/servers/x/facts.json 01:02:00\n"
        "STEP DONE 01:03:00\n"
    )
    proc, took = launch(es, tmp_path / "out", config="config/studies/no-such-study.yaml")
    assert proc.returncode == 6 and took < WAIT_S / 10
    assert "STEP FAILED start config/studies/no-such-study.yaml vllm" in (es / "steps.log").read_text()
    assert not (es / "driver.pid").exists()


def test_a_run_queued_before_its_prepare_began_is_queued_all_the_same(tmp_path):
    # loan 13: the second study's prepare waited for the first one's inputs, so its folder did not exist when
    # `after` queued it; the queue's log could not be written and the second run never started
    es, es2 = tmp_path / "es", tmp_path / "es2"
    proc, _ = script("after", es, "config/studies/rank-sweep.yaml", "sglang", ES=str(es2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "queued behind" in proc.stdout
    assert "No such file" not in proc.stderr
    assert (es2 / "after.log").exists()
    # it waits for the run before it to start (or its prepare to fail): end it with a failed prepare
    es.mkdir()
    (es / "steps.log").write_text("STEP FAILED prepare\n")
    (es2 / "steps.log").write_text("STEP FAILED prepare\n")
    # the queue then gives up without starting anything, and leaves no process behind (until setsid has exec'd,
    # the queue is a fork of the script, whose command line does not name es2: wait for it to show; it lives 5 s
    # at least)
    deadline = time.monotonic() + 30
    while not processes_naming(str(es2)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_naming(str(es2)), "the queue's process was not found"
    assert wait_gone(str(es2), 30, processes_naming) == []
    assert not (es2 / "driver.pid").exists()


def test_pack_brings_the_configs_adapters_and_the_loans_records_in_one_archive(tmp_path):
    # loan 14: a call brings back at most 8 files, and two runs' machine.txt, steps.log and caches.txt beside their
    # archives came to 10; and a run seeded from another study's inputs (SEED_FROM) packed that study's 128 adapters
    import tarfile

    es, out = tmp_path / "es", tmp_path / "out"
    for rel in ("results/adapters/r8.json", "results/adapters/m-000.json", "results/envs/vllm.json", "logs/x.log"):
        (es / "w" / rel).parent.mkdir(parents=True, exist_ok=True)
        (es / "w" / rel).write_text("{}")
    (es / "machine.txt").write_text("boot_id b\n")
    (es / "steps.log").write_text("STEP prepare a.yaml 12:24:58\nSTEP prepared 12:25:22\n")
    (es / "adapters.txt").write_text("results/adapters/r8.json\n")  # as prepare writes it from the config
    out.mkdir()
    proc, _ = script("pack", out, ES=str(es))
    assert sorted(p.name for p in out.iterdir()) == ["meta.tgz"], proc.stdout + proc.stderr
    with tarfile.open(out / "meta.tgz") as tar:
        names = set(tar.getnames())
    assert {"machine.txt", "steps.log", "caches.txt", "results/adapters/r8.json", "results/envs/vllm.json"} <= names
    assert "results/adapters/m-000.json" not in names
