"""Integrity without real servers: one measuring job per device (locks, foreign servers, several devices), the
canary against adapters served without effect (a fault-injection server), corrupted adapters, failed writes,
YAML booleans, the API key kept out of logs, and the engine venv key."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from lorabench import device, envs
from lorabench.config import ConfigError, load_and_check
from lorabench.engines import ServerSpec, all_server_markers, get_engine
from lorabench.envs import venv_path
from lorabench.io import CorruptArtifact, sha256_file, verify_manifest_files, write_jsonl
from lorabench.loadgen.client import make_session
from lorabench.measure.probes import AdapterIgnored, canary
from lorabench.session import engine_server

from .conftest import ROOT
from .support.fake_server import start_in_process


@pytest.fixture()
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("LORABENCH_LOCK_DIR", str(tmp_path / "locks"))
    return tmp_path / "locks"


def test_second_measuring_job_on_the_device_is_refused_naming_the_first(locks):
    with device.acquire("cpu", (), "lora-2") as lease:
        assert lease.device == "cpu" and lease.env == {}
        holder = subprocess.run(
            [sys.executable, "-c", "from lorabench import device\nwith device.acquire('cpu', (), 'lora-4'): pass"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "workflow")},
        )
        assert holder.returncode != 0
        assert "DeviceBusy" in holder.stderr and f"pid {os.getpid()} (lora-2)" in holder.stderr
    with device.acquire("cpu", (), "again"):  # released at the end of the block
        pass


def test_several_devices_each_job_its_own(locks, monkeypatch):
    monkeypatch.setenv("LORABENCH_DEVICES", "0,1")
    with device.acquire("gpu", (), "a") as a, device.acquire("gpu", (), "b") as b:
        assert {a.device, b.device} == {"0", "1"}
        assert a.env == {"CUDA_VISIBLE_DEVICES": a.device}
        with pytest.raises(device.DeviceBusy) as e, device.acquire("gpu", (), "c"):
            pass
        assert "device 0" in str(e.value) and "device 1" in str(e.value)


@pytest.mark.engine_processes
def test_live_foreign_server_on_the_device_is_refused_naming_it(locks, monkeypatch):
    monkeypatch.delenv(device.FOREIGN_SERVERS, raising=False)  # `make test`'s workers ignore each other's servers
    marker = get_engine("vllm").server_markers[0]
    assert marker in all_server_markers()
    if device.server_processes(all_server_markers()):
        pytest.skip("an engine server is already running on this machine: the refusal would name it instead")
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        time.sleep(0.2)
        with pytest.raises(device.DeviceBusy) as e, device.acquire("cpu", all_server_markers(), "lora-2"):
            pass
        assert f"pid {foreign.pid}" in str(e.value) and "outside this run" in str(e.value)
    finally:
        foreign.kill()
        foreign.wait()
    with device.acquire("cpu", all_server_markers(), "lora-2"):
        pass


def test_foreign_servers_ignored_only_when_asked_and_a_bad_value_named(locks, monkeypatch):
    monkeypatch.setenv(device.FOREIGN_SERVERS, "ignore")
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "lbt-foreign-marker"])
    try:
        time.sleep(0.2)
        with device.acquire("cpu", ("lbt-foreign-marker",), "lora-2") as lease:  # the lock is still taken
            assert not lease.foreign_checked
            with pytest.raises(device.DeviceBusy, match="held by another measuring job"):
                with device.acquire("cpu", (), "lora-4"):
                    pass
        monkeypatch.setenv(device.FOREIGN_SERVERS, "refuse")
        with pytest.raises(device.DeviceBusy, match=f"pid {foreign.pid}"):
            with device.acquire("cpu", ("lbt-foreign-marker",), "lora-2"):
                pass
        monkeypatch.setenv(device.FOREIGN_SERVERS, "off")
        with pytest.raises(ValueError, match="LORABENCH_FOREIGN_SERVERS='off'"):
            with device.acquire("cpu", (), "lora-2"):
                pass
    finally:
        foreign.kill()
        foreign.wait()


SPEC = ServerSpec(
    server_id="lora-2",
    engine="vllm",
    python="python",
    model_path="/m",
    served_name="m",
    lora=True,
    adapters={"a": "/a", "b": "/b"},
)


@pytest.mark.integration
def test_canary_catches_an_adapter_served_without_effect():
    proc, port = start_in_process()  # fault injection: the same output for every model name
    try:

        async def go():
            async with make_session(2) as s:
                return await canary(s, f"http://127.0.0.1:{port}", get_engine("vllm"), SPEC, ["a", "b"])

        with pytest.raises(AdapterIgnored) as e:
            asyncio.run(go())
    finally:
        proc.kill()
    assert "adapter(s) a, b" in str(e.value) and "without applying them" in str(e.value)


def _manifest(tmp_path: Path) -> dict:
    d = tmp_path / "a"
    d.mkdir()
    (d / "adapter_model.safetensors").write_bytes(os.urandom(4096))
    f = d / "adapter_model.safetensors"
    return {"name": "a", "path": str(d), "files": {f.name: {"bytes": 4096, "sha256": sha256_file(f)}}}


def test_truncated_adapter_fails_by_name(tmp_path: Path):
    m = _manifest(tmp_path)
    verify_manifest_files(m, "adapter a")
    f = Path(m["path"]) / "adapter_model.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(CorruptArtifact) as e:
        verify_manifest_files(m, "adapter a")
    assert "adapter a changed after it was built" in str(e.value) and "1000 bytes" in str(e.value)
    assert "--forcerun adapter_build" in str(e.value)


def test_failed_write_leaves_neither_a_partial_nor_a_complete_looking_file(tmp_path: Path):
    # A file-size limit stands for a full disk: the write fails part-way.
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "from lorabench.io import write_jsonl\n"
        f"write_jsonl({str(tmp_path / 'records.jsonl')!r}, [{{'x': 'y' * 100}}] * 1000)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "workflow")},
    )
    # Python ignores SIGXFSZ, so the write past the limit fails with EFBIG: an OSError, exit status 1.
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert proc.stderr.rstrip().splitlines()[-1] == "OSError: [Errno 27] File too large", proc.stderr
    assert list(tmp_path.iterdir()) == []
    write_jsonl(tmp_path / "ok.jsonl", [{"x": 1}])
    assert json.loads((tmp_path / "ok.jsonl").read_text()) == {"x": 1}


DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def test_yaml_boolean_key_is_explained(monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text().replace("  lora-off:", "  off:"))
    with pytest.raises(ConfigError) as e:
        load_and_check(cfg)
    assert "servers: a key written off, no or false was read as the boolean False" in str(e.value)
    assert "quote it" in str(e.value)
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text().replace("pin: auto", "pin: off"))
    with pytest.raises(ConfigError) as e:
        load_and_check(cfg)
    assert "harness.pin" in str(e.value) and "quote the value" in str(e.value)


def test_api_key_never_in_the_logged_argv(tmp_path: Path):
    spec = ServerSpec(server_id="s", engine="sglang", python="python", model_path="/m", served_name="m")
    srv = engine_server(get_engine("sglang"), spec, "127.0.0.1", tmp_path / "log", None, api_key="s3cret-key")
    assert "s3cret-key" in srv.argv and "s3cret-key" not in " ".join(srv.public_argv)
    assert srv.headers == {"Authorization": "Bearer s3cret-key"}
    vspec = ServerSpec(server_id="v", engine="vllm", python="python", model_path="/m", served_name="m")
    vsrv = engine_server(get_engine("vllm"), vspec, "127.0.0.1", tmp_path / "log", None, api_key="s3cret-key")
    assert "s3cret-key" not in " ".join(vsrv.argv) and vsrv.env["VLLM_API_KEY"] == "s3cret-key"


# What a vLLM server leaves in the temp dir and never removes: a ZMQ socket per channel, a rendezvous file per start.
LITTER = """
import os, socket, sys, tempfile, time, uuid
d = tempfile.gettempdir()
socket.socket(socket.AF_UNIX).bind(os.path.join(d, str(uuid.uuid4())))
open(os.path.join(d, "vllm_dist_" + uuid.uuid4().hex), "w").close()
print("inductor", os.environ["TORCHINDUCTOR_CACHE_DIR"], flush=True)
time.sleep(300)
"""


def littering_server(tmp_path: Path, pidfile: Path):
    from lorabench.server import ManagedServer

    return ManagedServer([sys.executable, "-c", LITTER], {}, tmp_path / "server.log", "127.0.0.1", 1, "/", pidfile)


def wait_litter(folder: Path) -> None:
    deadline = time.monotonic() + 30
    while len(list(folder.iterdir())) < 2:
        assert time.monotonic() < deadline, f"the server wrote nothing in {folder}"
        time.sleep(0.05)


def test_a_stopped_server_leaves_nothing_in_the_temp_dir(tmp_path: Path, short_tmp: Path, monkeypatch):
    tmp = short_tmp
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    srv = littering_server(tmp_path, tmp_path / "server.pid")
    srv.start()
    assert srv.scratch and srv.scratch.parent == tmp
    wait_litter(srv.scratch)
    assert srv.pidfile.read_text().split() == [str(srv.proc.pid), str(srv.scratch)]
    srv.stop()
    assert list(tmp.iterdir()) == [] and not srv.pidfile.exists()
    # torch's compile cache stays where it was (the temp dir), shared by every server
    assert f"inductor {tmp}/torchinductor_" in (tmp_path / "server.log").read_text()


def test_a_server_that_cannot_start_leaves_no_temp_dir(tmp_path: Path, short_tmp: Path):
    from lorabench.server import ManagedServer

    srv = ManagedServer([str(tmp_path / "no-such-engine")], {}, tmp_path / "log", "127.0.0.1", 1, "/")
    with pytest.raises(FileNotFoundError):
        srv.start()
    assert list(short_tmp.iterdir()) == []


def test_a_killed_attempts_temp_files_go_with_its_server(tmp_path: Path, short_tmp: Path):
    tmp = short_tmp
    first = littering_server(tmp_path, tmp_path / "server.pid")
    first.start()
    wait_litter(first.scratch)
    os.killpg(first.proc.pid, signal.SIGKILL)  # the job was killed: its stop() never ran
    first.proc.wait()
    second = littering_server(tmp_path, tmp_path / "server.pid")
    second.start()  # reaps the first attempt's group and its folder
    assert [p.name for p in tmp.iterdir()] == [second.scratch.name]
    second.stop()
    assert list(tmp.iterdir()) == []


def test_venv_key_covers_everything_that_changes_the_environment(tmp_path: Path):
    req = tmp_path / "req.txt"
    req.write_text("x==1\n")
    base = {"engine": "e", "version": "1", "requirements": str(req), "python_version": "3.11", "remove": []}
    base["env_root"] = str(tmp_path)
    paths = {venv_path(base)}
    for change in ({"python_version": "3.12"}, {"remove": ["torchvision"]}, {"version": "2"}):
        paths.add(venv_path({**base, **change}))
    req.write_text("x==2\n")
    paths.add(venv_path(base))
    assert len(paths) == 5


def test_one_api_key_per_study_kept_private(tmp_path: Path):
    from lorabench.server import study_api_key

    key = study_api_key(tmp_path / "results")
    assert len(key) >= 24 and study_api_key(tmp_path / "results") == key  # reused: the compile cache key holds
    assert (tmp_path / "results" / ".api-key").stat().st_mode & 0o077 == 0
    assert study_api_key(tmp_path / "other") != key


def test_api_key_never_reads_as_a_flag(tmp_path: Path):
    # SGLang takes the key as `--api-key KEY`: a key starting with "-" made every server of a study (the H200 loan
    # of 2026-12-03) exit with "argument --api-key: expected one argument".
    from lorabench.server import study_api_key

    results = tmp_path / "results"
    results.mkdir()
    (results / ".api-key").write_text("-rxOldKeyOfAnEarlierVersion")
    key = study_api_key(results)
    assert not key.startswith("-") and (results / ".api-key").read_text() == key
    assert not any(study_api_key(tmp_path / f"r{i}").startswith("-") for i in range(200))


def _fake_pip(tmp_path: Path, failures: int, message: str) -> str:
    """A stand-in for a venv's python whose ``-m pip install`` fails ``failures`` times with ``message``."""
    count = tmp_path / "calls"
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\n"
        f"n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}\n"
        f'if [ $n -le {failures} ]; then echo "ERROR: {message}" >&2; exit 1; fi\n'
    )
    script.chmod(0o755)
    return str(script)


def test_pip_install_is_tried_again_after_a_broken_download(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(envs.time, "sleep", lambda s: None)
    py = _fake_pip(tmp_path, 1, "Connection broken: IncompleteRead")
    envs._pip_install(py, tmp_path / "req.txt", tmp_path)
    assert (tmp_path / "calls").read_text().strip() == "2"
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(RuntimeError, match=r"tried 2 times; free space: .* GiB in"):
        envs._pip_install(_fake_pip(other, 5, "HTTP error 503"), tmp_path / "req.txt", tmp_path, attempts=2)
    assert (other / "calls").read_text().strip() == "2"


def test_full_disk_stops_the_build_at_once_naming_the_folders(tmp_path: Path):
    py = _fake_pip(tmp_path, 5, "[Errno 28] No space left on device")
    with pytest.raises(RuntimeError, match=rf"the disk is full \(free space: .* GiB in {tmp_path}") as err:
        envs._pip_install(py, tmp_path / "req.txt", tmp_path)
    assert "env_root" in str(err.value)
    assert (tmp_path / "calls").read_text().strip() == "1"


def _record_runs(monkeypatch, compileall_error: str = "") -> list[list[str]]:
    """``envs._run`` replaced by a recorder of its command lines: ``-m venv`` makes the folder, every other command
    does nothing, except compileall, which fails with ``compileall_error`` where one is given."""
    calls: list[list[str]] = []

    def run(argv: list[str], env=None, what: str = "", heartbeat_s: float = 30.0) -> str:
        calls.append(argv)
        if argv[1:3] == ["-m", "venv"]:
            Path(argv[3]).mkdir(parents=True)
        if compileall_error and "compileall" in argv:
            raise RuntimeError(f"byte-compile failed (exit 1):\n{compileall_error}")
        return ""

    monkeypatch.setattr(envs, "_run", run)
    return calls


def _venv_spec(tmp_path: Path, **extra) -> dict:
    """An engine environment's spec with a one-line requirements file, under ``tmp_path/envs``."""
    req = tmp_path / "req.txt"
    req.write_text("tiny==1.0\n")
    return {"engine": "e", "version": "1", "requirements": str(req), "env_root": str(tmp_path / "envs"),
            "python_version": f"{sys.version_info.major}.{sys.version_info.minor}", **extra}  # fmt: skip


def test_an_environment_is_byte_compiled_on_every_core_after_pip(tmp_path: Path, monkeypatch):
    """pip installs without compiling (it would, one file at a time); compileall -j 0 does it after, and a file
    that does not compile (exit 1) leaves the environment complete, as pip would."""
    calls = _record_runs(monkeypatch, compileall_error="*** Error compiling 'py2_sample.py'")
    venv = envs.build_venv(_venv_spec(tmp_path, remove=["x"]))
    pip = next(c for c in calls if c[1:4] == ["-m", "pip", "install"])
    assert "--no-compile" in pip
    assert [c[2] for c in calls[1:]] == ["pip", "pip", "compileall"]  # install, uninstall, then compile
    assert calls[-1][-4:] == ["-q", "-j", "0", str(venv / "lib")]
    assert (venv / ".complete").exists()


def test_a_second_build_of_the_same_environment_waits_for_the_first(tmp_path: Path, monkeypatch, caplog):
    """Two runs sharing env_root: the second waits on the first one's lock instead of removing its half-built
    venv, then reuses it where the first one finished it, or builds it where the first one died halfway."""
    calls = _record_runs(monkeypatch)
    spec = _venv_spec(tmp_path)
    venv = venv_path(spec)
    for finished in (True, False):
        venv.mkdir(parents=True)  # the first run's build, halfway
        fd = os.open(venv.with_name(venv.name + ".lock"), os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"pid 4242\n")
        got: list[Path] = []
        second = threading.Thread(target=lambda out=got: out.append(envs.build_venv(spec)))
        with caplog.at_level("INFO", logger="lorabench.envs"):
            second.start()
            deadline = time.monotonic() + 60  # it reaches the lock within a moment, on a busy host within seconds
            while "waiting for pid 4242 to finish building" not in caplog.text:
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.05)
            assert second.is_alive() and venv.is_dir() and not calls  # waiting; the half-built venv untouched
            if finished:
                (venv / ".complete").write_text("done\n")
            os.close(fd)  # the first run ends (or dies): the kernel releases its lock
            second.join(60)
        assert got == [venv] and (venv / ".complete").exists()
        assert "waiting for pid 4242 to finish building" in caplog.text
        assert bool(calls) is not finished, calls  # reused as the first run left it, else built anew
        shutil.rmtree(venv)
        calls.clear()
        caplog.clear()
