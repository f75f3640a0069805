"""Server lifecycle: start an engine without a shell, wait until ready, always stop the whole process group.

``ManagedServer`` is a context manager. On entry it starts the process in a new session (its own process
group), asks the kernel to signal it if this process dies (``PR_SET_PDEATHSIG``), and records the group id in
a pidfile. ``wait_ready`` races health polling against process exit under a deadline. On exit, also on errors,
SIGINT or SIGTERM, it stops the group: SIGTERM to the leader, a grace period, then the group. A pidfile left
by a killed job lets the next attempt reap the old group first (``reap_stale``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import getpass
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from .resources import proc_stat

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


class ServerStartError(RuntimeError):
    """The server exited or did not become ready in time; the message holds the tail of its log."""


def study_api_key(results: Path) -> str:
    """The API key the servers of one study require: made once in ``results/.api-key`` (readable by its owner
    only), then reused by every server job and every rerun of the study. One key per study rather than per start:
    vLLM folds its environment, ``VLLM_API_KEY`` included, into the key of its compile cache, so a fresh key per
    start would make every start compile again. The key never starts with "-": an engine that takes it on its
    command line (SGLang's ``--api-key KEY``) would read such a key as a flag and refuse to start; a key of an
    older study that does is replaced."""
    path = results / ".api-key"
    with contextlib.suppress(FileNotFoundError):  # none yet, or another job of the study replacing it first
        if path.read_text().startswith("-"):
            path.unlink(missing_ok=True)
    if not path.exists():
        results.mkdir(parents=True, exist_ok=True)
        tmp = results / f".api-key.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("lb" + secrets.token_urlsafe(24))
        with contextlib.suppress(FileExistsError):  # another job of the study made it first: use theirs
            os.link(tmp, path)
        tmp.unlink()
    key = path.read_text().strip()
    if not key:
        raise ServerStartError(f"{path} is empty: remove it and run again")
    return key


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _child_setup(cpus: tuple[int, ...] | None = None) -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if cpus:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cpus)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_group(pgid: int, grace_s: float = 20.0) -> None:
    """Stop a server's process group: SIGTERM to the leader first (engines shut their workers down themselves;
    signalling every process at once left vLLM's helpers hanging for seconds), then SIGTERM to the group, then
    SIGKILL to whatever is left."""

    def wait(deadline_s: float) -> bool:
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pgid, os.WNOHANG)  # reap the leader if it is our child, so a zombie does not count
            if not group_alive(pgid):
                return True
            time.sleep(0.1)
        return not group_alive(pgid)

    with contextlib.suppress(ProcessLookupError):
        os.kill(pgid, signal.SIGTERM)
    if wait(grace_s):
        return
    log.warning("process group %d still alive %.0f s after SIGTERM to its leader: SIGTERM to the group", pgid, grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    if wait(5):
        return
    log.warning("process group %d ignored SIGTERM: SIGKILL", pgid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    wait(5)


def reap_stale(pidfile: Path) -> None:
    """Stop a server group recorded by an earlier, killed attempt of the same job."""
    if not pidfile.exists():
        return
    lines = pidfile.read_text().splitlines()
    try:
        pgid = int(lines[0].split()[0])
    except (ValueError, IndexError):
        pidfile.unlink(missing_ok=True)
        return
    if group_alive(pgid):
        log.warning("reaping server group %d left by an earlier attempt (%s)", pgid, pidfile)
        kill_group(pgid)
    for line in lines[1:2]:  # the attempt's scratch folder (ManagedServer.start)
        remove_scratch(Path(line))
    pidfile.unlink(missing_ok=True)


SCRATCH_PREFIX = "lorabench-srv-"  # short: a socket path in it holds at most 107 bytes


def scratch_env(folder: Path) -> dict[str, str]:
    """Environment that gives a server's temporary files a folder of its own (``TMPDIR``), removed once the server
    has stopped: vLLM leaves a ZMQ socket per channel (``VLLM_RPC_BASE_PATH``, by default the temp dir) and a
    rendezvous file per start in it, about eight per server, that no one removes. Torch's compile cache, which
    defaults to the temp dir too, stays where it was, so that servers still share it."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):  # no passwd entry (some containers)
        user = f"uid_{os.getuid()}"
    # where torch._inductor.runtime.cache_dir_utils.default_cache_dir puts it, without importing torch
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user)
    )
    return {"TMPDIR": str(folder), "TORCHINDUCTOR_CACHE_DIR": inductor}


def remove_scratch(folder: Path) -> None:
    """Remove a server's scratch folder (only one this module made: a pidfile's second line is not trusted)."""
    if folder.name.startswith(SCRATCH_PREFIX) and folder.parent == Path(tempfile.gettempdir()):
        shutil.rmtree(folder, ignore_errors=True)


def _log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def snakemake_ancestor() -> int | None:
    """The pid of the Snakemake process this job runs under, if any (nearest ancestor naming snakemake)."""
    pid = os.getppid()
    while pid > 1:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        if b"snakemake" in cmd and b".snakemake/scripts" not in cmd:
            return pid
        stat = proc_stat(pid)
        if stat is None:
            return None
        pid = int(stat[1])
    return None


def _alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X")


def _watch(pid: int, stop: threading.Event, interval_s: float) -> None:
    while not stop.wait(interval_s):
        if not _alive(pid):
            log.warning("snakemake (pid %d) is gone: stopping this job and its server", pid)
            os.kill(os.getpid(), signal.SIGTERM)
            return


@contextlib.contextmanager
def terminate_on_signals(watch_interval_s: float = 1.0) -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into SystemExit so context managers run (snakemake stops jobs with signals), and stop
    the same way when the Snakemake process that started this job dies without a word (SIGKILL, the
    out-of-memory killer): a job that outlived it would go on measuring and could meet a rerun's server."""

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    stop = threading.Event()
    parent = snakemake_ancestor()
    if parent:
        threading.Thread(target=_watch, args=(parent, stop, watch_interval_s), daemon=True).start()
    try:
        yield
    finally:
        stop.set()
        for s, h in old.items():
            signal.signal(s, h)


class ManagedServer:
    """One engine server process group, owned from start to stop."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        host: str,
        port: int,
        ready_path: str,
        pidfile: Path | None = None,
        cpus: tuple[int, ...] | None = None,
        api_key: str | None = None,
    ) -> None:
        self.argv = argv
        self.api_key = api_key  # sent by every client of this server; never logged or written
        self.cpus = cpus  # CPUs the server's processes start on (their children inherit it)
        self.env = env
        self.log_path = log_path
        self.host = host
        self.port = port
        self.ready_path = ready_path
        self.pidfile = pidfile
        self.proc: subprocess.Popen[bytes] | None = None
        self.scratch: Path | None = None  # the server's own temp dir, from start until it has stopped
        self.started_at = 0.0
        self.ready_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def public_argv(self) -> list[str]:
        """The argv with the API key blanked, for logs and facts."""
        return [("***" if self.api_key and a == self.api_key else a) for a in self.argv]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def start(self) -> None:
        if self.pidfile:
            reap_stale(self.pidfile)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        logf = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        log.info("starting: %s", " ".join(self.public_argv))
        self.started_at = time.monotonic()
        self.scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        try:
            self.proc = subprocess.Popen(
                self.argv,
                env={**os.environ, **scratch_env(self.scratch), **self.env},  # a TMPDIR in env (a spec's) wins
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=functools.partial(_child_setup, self.cpus),  # noqa: PLW1509 - prctl + affinity only
            )
        except BaseException:
            logf.close()
            remove_scratch(self.scratch)
            raise
        self._logf = logf
        if self.pidfile:
            self.pidfile.parent.mkdir(parents=True, exist_ok=True)
            self.pidfile.write_text(f"{self.proc.pid}\n{self.scratch}\n")

    def wait_ready(self, timeout_s: float, progress_every_s: float = 15.0) -> float:
        """Poll the readiness endpoint until it answers 200; fail at once if the process exits."""
        assert self.proc is not None
        deadline = self.started_at + timeout_s
        next_note = time.monotonic() + progress_every_s
        url = self.base_url + self.ready_path
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(
                    f"server exited with code {code} before it was ready; log {self.log_path}:\n"
                    + _log_tail(self.log_path)
                )
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=self.headers), timeout=2) as r:
                    if r.status == 200:
                        self.ready_s = time.monotonic() - self.started_at
                        log.info("server ready after %.1f s", self.ready_s)
                        return self.ready_s
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            now = time.monotonic()
            if now > deadline:
                raise ServerStartError(
                    f"server not ready after {timeout_s:.0f} s; log {self.log_path}:\n" + _log_tail(self.log_path)
                )
            if now >= next_note:
                log.info("waiting for server readiness: %.0f s so far", now - self.started_at)
                next_note = now + progress_every_s
            time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is None:
            return
        pgid = self.proc.pid
        if self.proc.poll() is None or group_alive(pgid):
            log.info("stopping server group %d", pgid)
            kill_group(pgid)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        self._logf.close()
        if self.scratch and not group_alive(pgid):  # kill_group gave up on a process: its files stay with it
            remove_scratch(self.scratch)
        if self.pidfile:
            self.pidfile.unlink(missing_ok=True)
        self.proc = None

    def __enter__(self) -> ManagedServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
