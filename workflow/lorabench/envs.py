"""Engine environments: one isolated venv per engine and version, or an existing installation.

A venv is built from a pinned requirements file in ``envs/`` (installed with ``--no-deps`` so it holds exactly
that list), into ``{env_root}/{engine}-{version}-{hash}``; a ``.complete`` marker is written last, so a build
killed halfway is redone rather than trusted, and a lock file beside it (``{name}.lock``) makes a second run that
needs the same venv wait for the first one's build instead of removing it as incomplete. Either way the resolved
version is checked against the config and a full ``pip freeze`` is recorded.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .config import stable_hash
from .engines import get_engine
from .io import write_json, write_text_atomic

log = logging.getLogger(__name__)

PIP_ATTEMPTS = 3  # a failed pip install is tried again this many times in all (downloads that break halfway)


def _run(argv: list[str], env: dict[str, str] | None = None, what: str = "", heartbeat_s: float = 30.0) -> str:
    """Run a command, its output to the job log, with a progress line every ``heartbeat_s`` on long steps."""
    log.info("%s: %s", what or "run", " ".join(argv))
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out_chunks: list[str] = []
    err_chunks: list[str] = []

    def pump(stream: Any, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)
            sys.stderr.write(line)

    threads = [
        threading.Thread(target=pump, args=(proc.stdout, out_chunks), daemon=True),
        threading.Thread(target=pump, args=(proc.stderr, err_chunks), daemon=True),
    ]
    for t in threads:
        t.start()
    while True:
        try:
            proc.wait(timeout=heartbeat_s)
            break
        except subprocess.TimeoutExpired:
            log.info("%s: still running (%.0f s)", what or argv[0], time.monotonic() - t0)
    for t in threads:
        t.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{what or argv[0]} failed (exit {proc.returncode}):\n{''.join(err_chunks)[-3000:]}")
    log.info("%s done in %.0f s", what or "run", time.monotonic() - t0)
    return "".join(out_chunks)


def _interpreter(version: str) -> str:
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    exe = shutil.which(f"python{version}")
    if not exe:
        raise RuntimeError(f"python_version {version}: no python{version} on PATH")
    return exe


def engine_version(python: str, kind: str, env: dict[str, str]) -> str:
    code = get_engine(kind).version_code()
    return _run([python, "-c", code], env, what="version check").strip().splitlines()[-1]


def freeze(python: str, env: dict[str, str]) -> str:
    code = (
        "import importlib.metadata as m\n"
        "print('\\n'.join(sorted(f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions())))"
    )
    return _run([python, "-c", code], env, what="freeze")


def venv_path(spec: dict[str, Any]) -> Path:
    """Where an engine's venv lives, keyed on everything that changes what gets installed: a changed pin,
    interpreter or removal list is a new venv, never a silently reused old one."""
    req = Path(spec["requirements"])
    key = {"requirements": req.read_text(), "python": spec["python_version"], "remove": sorted(spec.get("remove", []))}
    return Path(spec["env_root"]).resolve() / f"{spec['engine']}-{spec['version']}-{stable_hash(key, 8)}"


def _free_gib(path: Path) -> float:
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free / 2**30


def _pip_install(py: str, req: Path, root: Path, attempts: int = PIP_ATTEMPTS) -> None:
    """``pip install -r req`` into the venv of ``py``, tried again after a failure (a registry that drops a
    download halfway is the usual one), except when the disk is full: that error names the folders and their
    free space instead."""
    argv = [py, "-m", "pip", "install", "--no-deps", "--no-input", "--progress-bar", "off", "--no-compile", "-r",
            str(req)]  # fmt: skip
    for attempt in range(1, attempts + 1):
        try:
            _run(argv, what=f"pip install -r {req}")
            return
        except RuntimeError as exc:
            tmp = Path(os.environ.get("TMPDIR", "/tmp"))
            space = f"free space: {_free_gib(root):.1f} GiB in {root}, {_free_gib(tmp):.1f} GiB in {tmp}"
            if "No space left on device" in str(exc) or "Errno 28" in str(exc):
                raise RuntimeError(
                    f"pip install -r {req}: the disk is full ({space}); an engine environment takes several "
                    f"GiB (the vLLM CPU build about 3.5): free space or set env_root to a larger disk\n{exc}"
                ) from exc
            if attempt == attempts:
                raise RuntimeError(f"{exc}\n(tried {attempts} times; {space})") from exc
            log.warning("pip install failed (attempt %d of %d, %s); trying again", attempt, attempts, space)
            time.sleep(5 * attempt)


def _byte_compile(py: str, venv: Path) -> None:
    """The venv's modules byte-compiled on every core at once, as pip (told ``--no-compile``) would have done one
    file at a time (benchmarks/env_install.py). A file that does not compile (a package's Python 2 sample) is left
    as pip leaves it: compileall then exits 1, which is logged, not raised."""
    try:
        _run([py, "-m", "compileall", "-q", "-j", "0", str(venv / "lib")], what="byte-compile")
    except RuntimeError as exc:  # the first line says how it ended: "byte-compile failed (exit N):"
        log.info("%s some files do not compile (listed above), left as pip leaves them", str(exc).splitlines()[0])


@contextlib.contextmanager
def _build_lock(venv: Path) -> Iterator[None]:
    """Hold ``{venv}.lock`` (an exclusive ``flock``) while the venv is checked and built: two runs sharing an
    env_root (two studies started together, or a build started ahead of a run) take turns, the second then finding
    the first one's complete venv, instead of deleting each other's half-built one. The holder's pid is in the file;
    the kernel releases the lock when the holder dies, however it dies."""
    path = venv.with_name(venv.name + ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text().strip() or "another process"
            log.info("waiting for %s to finish building %s", holder, venv)
            t0 = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            log.info("waited %.0f s for the other build", time.monotonic() - t0)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # releases the lock


def build_venv(spec: dict[str, Any]) -> Path:
    req = Path(spec["requirements"])
    root = Path(spec["env_root"]).resolve()
    venv = venv_path(spec)
    marker = venv / ".complete"
    if marker.exists():
        log.info("reusing engine environment %s", venv)
        return venv
    root.mkdir(parents=True, exist_ok=True)
    with _build_lock(venv):
        if marker.exists():  # built by the run this one waited for
            log.info("reusing engine environment %s", venv)
            return venv
        if venv.exists():
            log.warning("removing incomplete environment %s", venv)
            shutil.rmtree(venv)
        log.info("building engine environment %s (a few minutes; %.1f GiB free there)", venv, _free_gib(root))
        _run([_interpreter(spec["python_version"]), "-m", "venv", str(venv)], what="venv")
        py = str(venv / "bin" / "python")
        _pip_install(py, req, root)
        if spec.get("remove"):
            _run([py, "-m", "pip", "uninstall", "-y", *spec["remove"]], what="pip uninstall")
        _byte_compile(py, venv)
        marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
    return venv


def prepare_env(spec: dict[str, Any], info_path: str | Path, freeze_path: str | Path) -> dict[str, Any]:
    info: dict[str, Any] = {"engine": spec["engine"], "kind": spec["kind"], "version_config": spec["version"]}
    if not spec["runnable"]:
        info.update(status="not run: needs a GPU", python=None, env={}, version=None)
        write_text_atomic(freeze_path, "# not run: needs a GPU\n")
        write_json(info_path, info)
        return info
    if spec.get("existing"):
        python = spec["existing"]["python"]
        env = dict(spec["existing"].get("env", {}))
        info["source"] = "existing"
    else:
        venv = build_venv(spec)
        python = str(venv / "bin" / "python")
        env = {}
        info["source"] = "venv"
        info["venv"] = str(venv)
    version = engine_version(python, spec["kind"], env)
    if version != spec["version"]:
        raise RuntimeError(
            f"engines.{spec['engine']}.version: config says {spec['version']} but {python} has {version}"
        )
    frozen = freeze(python, env)
    info.update(
        status="ok",
        python=python,
        env=env,
        version=version,
        python_version=_run([python, "-c", "import sys; print(sys.version.split()[0])"], env).strip(),
    )
    write_text_atomic(freeze_path, frozen)
    write_json(info_path, info)
    log.info("engine %s: %s %s at %s", spec["engine"], spec["kind"], version, python)
    return info
