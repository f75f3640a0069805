"""Shared fixtures. Slow tests start real vLLM (CPU build) servers: CI (`make test`) runs them but for those also
marked full (the longer matrix), which `make test-all` runs too."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
FIXTURES = ROOT / "tests" / "fixtures"
# Committed studies as the tests read them: each one's files that some test reads, cut from its records
# (tests/fixtures/cut.py, tests/fixtures/README.md). Tests read these, never studies/ (only test_study_archives.py
# does: it checks each study's archive).
STUDIES = FIXTURES / "studies"


# The default study's measurement, lighter for the tests (they check behaviour, not figures; `make study` runs it
# as configured): 6 cycles exactly (the fewest with a true 95 % interval), at most 20 s of bursts per server job,
# bursts of 4 only (its two LoRA server jobs then took 69 and 60 s instead of 97 and 97 s, on 2026-12-05); the
# fixture also leaves the 4-slot server out and cuts the 2-slot one's mixes to three (``STUDY_MIXES``).
LIGHTER = {
    "repetitions": "6",
    "max_repetitions": "6",
    "max_measuring_s": "20",
    "bursts": "[4]",
}
# The 2-slot server's mixes in the session's study: the base model, one adapter, and all three adapters over two
# slots (its six cells measured 6 cycles in about 40 s instead of 70 s for the ten of all five mixes).
STUDY_MIXES = "[base, a, abc]"
# Server flags of the test-made studies, the session's `study` included: no torch.compile. A study copy's compile
# cache starts empty (it lives in the study's results/), and its first vLLM start compiles: the session's study,
# compiled, took 107 s to be ready on a busy 2-core host (2026-12-07), its second server 53 s with the cache's hits,
# against about 35-40 s each without (`make study` compiles, and reports its cache's hits). (vLLM's single-process
# executor, distributed_executor_backend uni, was tried for faster starts and was slower: ready after a median 38 s
# against 32 s with the default executor, 8 starts each, in two `make test` runs of 2026-12-05 on 2 cores.)
EAGER = {"enforce_eager": True}
# The session study's co-resident group (``study``): its two servers, in the order the group starts them.
STUDY_GROUP, STUDY_GROUP_SERVERS = "pair", ("lora-off", "lora-2")
# What a study builds before any server starts, made once per test session and copied into the studies of the
# tests that are about servers, not builds (model, adapters, request set, engine environment record).
INPUTS = ("model", "adapters", "workload", "envs")


# `make test` and `make test-all` run the suite on two pytest-xdist workers (-n 2 --dist loadgroup). The tests that
# start engine servers (marked slow) or a process that looks like one (marked engine_processes) are cut in two xdist
# groups, each run on one worker, in file order, sharing that worker's session fixtures; the tests that start none
# fill in beside them. Two measuring jobs of different runs refuse to share the machine's one device
# (lorabench/device.py), so each worker has a lock directory of its own and ignores the other's servers
# (LORABENCH_FOREIGN_SERVERS=ignore: the tests check behaviour, not figures). A test marked engine_processes (the
# device check's own, which needs no other server alive) runs while no test of the other worker's group does
# (``pytest_runtest_protocol``). The groups: the session's default study and the tests that read it (tests/engines/
# test_vllm.py's first test sets it up) with some of the studies built on ``built_inputs``, and the rest of those,
# of about the same length in `make test-all`. `make test` leaves out the tests
# marked full: its one group is the session's study and the tests that read it, on one worker, while the other takes
# the tests that start no server (the study's servers wait for the engine environment anyway, which `make test`
# builds in the background). ``built_inputs`` is built once per test run, by whichever worker asks first.
SERVERS_GROUPS = ("engine-servers-study", "engine-servers-inputs")
STUDY_GROUP_FILES = {
    "test_vllm.py", "test_pipeline_e2e.py", "test_faults_real.py", "test_integrity.py", "test_capacity_real.py",
    "test_workloads_real.py", "test_prefix_cache_real.py", "test_studies_real.py", "test_plugin.py",
    "test_groups_real.py",
}  # fmt: skip


def servers_group(item: pytest.Item) -> str | None:
    if not (item.get_closest_marker("slow") or item.get_closest_marker("engine_processes")):
        return None
    return SERVERS_GROUPS[0] if item.path.name in STUDY_GROUP_FILES else SERVERS_GROUPS[1]


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = servers_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def _worker_locks(config: pytest.Config) -> Path | None:
    """On an xdist worker, the lock folder of this test run (in the base temp folder its workers share; made by
    ``pytest_configure``)."""
    if not hasattr(config, "workerinput"):
        return None
    return Path(config.option.basetemp).parent / "locks"


def pytest_configure(config: pytest.Config) -> None:
    locks = _worker_locks(config)
    if locks is not None:
        from lorabench.device import FOREIGN_SERVERS

        locks.mkdir(parents=True, exist_ok=True)
        os.environ["LORABENCH_LOCK_DIR"] = str(locks / config.workerinput["workerid"])
        os.environ[FOREIGN_SERVERS] = "ignore"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """On an xdist worker, a test of a servers group holds a shared lock on a file of this test run while it runs
    (setup, call, teardown), and a test marked engine_processes an exclusive one, taken through a turnstile so
    that the other worker's next test waits for it rather than slipping in first."""
    locks = _worker_locks(item.config)
    if locks is None or servers_group(item) is None:
        yield
        return
    with open(locks / "turnstile", "a") as turn, open(locks / "servers", "a") as rw:
        fcntl.flock(turn, fcntl.LOCK_EX)
        if item.get_closest_marker("engine_processes"):
            fcntl.flock(rw, fcntl.LOCK_EX)
            fcntl.flock(turn, fcntl.LOCK_UN)
        else:
            fcntl.flock(turn, fcntl.LOCK_UN)
            fcntl.flock(rw, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(rw, fcntl.LOCK_UN)


@pytest.fixture()
def short_tmp(monkeypatch: pytest.MonkeyPatch):
    """A temp dir of its own for this test, in this process (``tempfile``) and in what it starts (``TMPDIR``), with a
    short path: a socket's path in it holds at most 107 bytes, and tmp_path's are long."""
    tmp = Path(tempfile.mkdtemp(prefix="lbt-"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default study, run once per test session in a copy of the repository with ``LIGHTER`` measurement
    settings, ``STUDY_MIXES``, ``EAGER`` servers and its two servers in one co-resident group (``STUDY_GROUP``)
    written into the copy's config (real vLLM servers; it also builds the engine environment that other slow tests
    use). Snakemake runs it on two cores: the model, adapters
    and request set build while the engine environment is still being built (`make test` builds it in the
    background); its server jobs run one at a time all the same."""
    from .test_pipeline_e2e import copy_repo, snakemake

    work = copy_repo(tmp_path_factory.mktemp("study"))
    cfg = work / "config" / "config.yaml"
    text = cfg.read_text()
    for key, value in LIGHTER.items():
        text, n = re.subn(rf"^{key}: *(\[[^\]\n]*\]|[\d.]+)", f"{key}: {value}", text, count=1, flags=re.M)
        assert n == 1, f"config/config.yaml has no top-level {key}"
    # without its 4-slot server (the 2-slot one measures LoRA's cost, loads adapters at run time and shows that
    # a second server is planned and measured alike): one server start and its cycles fewer
    start, end = text.index("\n  lora-4:\n"), text.index("\n  sglang-lora-2:\n")
    text = text[:start] + text[end:]
    start, end = text.index("\n  lora-2:\n"), text.index("\n  sglang-lora-2:\n")
    lora2, n = re.subn(r"conditions: \[[^\]\n]*\]", f"conditions: {STUDY_MIXES}", text[start:end])
    assert n == 1, "config/config.yaml's lora-2 has no conditions list"
    text = text[:start] + lora2 + text[end:]
    # no torch.compile: every server's args get enforce_eager
    text, n = re.subn(r"args: \{max_model_len: 512\}", "args: {max_model_len: 512, enforce_eager: true}", text)
    assert n == 2, "config/config.yaml's vLLM servers have other args than max_model_len 512"
    # the LoRA-off and 2-slot servers co-resident, measured by one job (lorabench.group): the group's mechanics in
    # `make test` (tests/test_groups_real.py), at no more server starts than two jobs of their own
    text += f"\ngroups:\n  {STUDY_GROUP}: {{servers: [{', '.join(STUDY_GROUP_SERVERS)}]}}\n"
    cfg.write_text(text)
    snakemake(work, cores=2)
    return work


@pytest.fixture(scope="session")
def built_inputs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository in which the default study's inputs (``INPUTS``) were built by Snakemake, and
    nothing else: the source that ``seed_inputs`` copies from. On `make test`'s workers, one for both: the first
    worker to ask builds it in their shared base temp folder, the other waits for it (a file lock) and reuses it."""
    locks = _worker_locks(request.config)
    if locks is None:
        return _build_inputs(tmp_path_factory.mktemp("inputs"))
    work, done = locks.parent / "inputs", locks.parent / "inputs.built"
    with open(locks / "inputs", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(work, ignore_errors=True)  # a build that failed on the other worker
            work.mkdir()
            _build_inputs(work)
            done.touch()
    return work


def _build_inputs(work: Path) -> Path:
    from .test_pipeline_e2e import copy_repo, snakemake

    copy_repo(work)
    adapters = yaml.safe_load((work / "config" / "config.yaml").read_text())["adapters"]
    targets = ["results/model/manifest.json", "results/workload/requests.json", "results/envs/vllm-cpu.json"]
    targets += [f"results/adapters/{a}.json" for a in adapters]
    snakemake(work, *targets, cores=2)  # the model and adapters build while the engine environment is built
    # vLLM inspects the model's class once per cache folder (VLLM_CACHE_ROOT: the study's results/cache/ENGINE),
    # in a subprocess that imports its model code: 15-30 s of a study's first server start here. Done once; the
    # copies get the record. Best effort: without it the copies' first starts only take longer.
    from lorabench.io import read_json

    env = read_json(work / "results/envs/vllm-cpu.json")
    arch = read_json(work / "results/model/manifest.json")["architectures"][0]
    code = f"from vllm.model_executor.models.registry import ModelRegistry as R; R._try_inspect_model_cls({arch!r})"
    subprocess.run(
        [env["python"], "-c", code],
        env={**os.environ, "VLLM_CACHE_ROOT": str(work / "results/cache/vllm-cpu")},
        capture_output=True,
        timeout=300,
    )
    return work


def seed_cache(work: Path, built: Path) -> None:
    """Copy the engine's model-inspection records (``built_inputs``) into the study copy ``work``."""
    src = built / "results/cache/vllm-cpu/modelinfos"
    if src.is_dir():
        shutil.copytree(src, work / "results/cache/vllm-cpu/modelinfos", dirs_exist_ok=True)


def seed_inputs(work: Path, built: Path) -> None:
    """Copy the built inputs and Snakemake's records of them into the study copy ``work``, the paths inside the
    manifests pointed at the copy (its servers read their own copy's files, and their command lines name it).
    Snakemake then plans nothing for them where the copy's config asks for the same; where it asks for other
    ones (a study with its own request set, say) it rebuilds those as usual."""
    for name in INPUTS:
        src = built / "results" / name
        if src.is_dir():
            shutil.copytree(src, work / "results" / name, symlinks=True, dirs_exist_ok=True)
    for f in (work / "results").glob("*/*.json"):
        text = f.read_text()
        if str(built) in text:
            f.write_text(text.replace(str(built), str(work)))
            shutil.copystat(built / f.relative_to(work), f)  # keep the build's time: newer than its inputs
    shutil.copytree(built / ".snakemake" / "metadata", work / ".snakemake" / "metadata", dirs_exist_ok=True)
    seed_cache(work, built)
