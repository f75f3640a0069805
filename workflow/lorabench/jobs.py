"""Job kinds: what a job does on its server, as implementations of one small interface.

A ``JobKind`` has a name, the folder of ``results/`` its outputs go to, the files it writes, and ``run``: on a
``session.ServerSession`` (which owns the device, the CPUs and every start and stop of the server) it measures and
returns a ``JobResult``, a typed record whose ``files`` are written once the job succeeded, each atomically, so
an interrupted job never leaves results that look complete. The kinds: the load test (``loadtest.LoadTest``),
runtime adapter loading (``runtime_load.RuntimeLoading``), prefix caching across adapters
(``prefix_cache.PrefixCaching``) and the rate sweep (``rate_sweep.RateSweep``). Each rule script builds its kind
from the rule's params and calls ``run_job``; a kind's settings travel as ``to_json``/``from_json``.

This module imports no kind (each rule script imports its own), so editing one kind never reruns another's jobs.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from .facts import ServerFacts
from .io import write_json, write_jsonl
from .job import JobInputs, ServerJob, read_inputs
from .resources import machine_facts
from .session import ServerSession

log = logging.getLogger(__name__)

Json = dict[str, Any]


class JobResult(Protocol):
    """What a job measured: ``to_json`` its main file, ``files`` every file it writes by name (a ``.jsonl`` name
    takes a list of rows, any other name one JSON object)."""

    def to_json(self) -> Json: ...

    def files(self) -> dict[str, Json | list[Json]]: ...


class JobKind(ABC):
    """One kind of job on one server configuration (the module's docstring)."""

    name: ClassVar[str]  # the rule's and the command line's name
    folder: ClassVar[str]  # results/FOLDER/SERVER/
    files: ClassVar[tuple[str, ...]]  # what it writes besides server.log; the first is its main file

    @abstractmethod
    def run(self, session: ServerSession) -> JobResult:
        """Measure on ``session``'s server (started and stopped through the session)."""

    def settings(self) -> Json:
        """The kind's own settings (the rule's ``kind`` params); none by default."""
        return {}

    def to_json(self) -> str:
        return json.dumps({"kind": self.name, **self.settings()}, sort_keys=True)

    def not_run(self, job: ServerJob, reason: str) -> dict[str, Json | list[Json]]:
        """The files of a job that cannot run here: empty tables and a main file that says why, never made-up
        numbers."""
        head = {"server": job.server_id, "engine": job.server.engine, "status": reason}
        return {name: [] if name.endswith(".jsonl") else dict(head) for name in self.files}


def kind_settings(text: str, kind: str) -> Json:
    """A kind's settings from the rule's params (``JobKind.to_json``), checked to be of ``kind``."""
    data = json.loads(text)
    if data.pop("kind", None) != kind:
        raise ValueError(f"job kind params {text[:80]!r} are not of kind {kind!r}")
    return dict(data)


def not_run_facts(job: ServerJob, reason: str) -> Json:
    """``facts.json`` of a server job that did not run: its configuration and the machine, and why."""
    facts = ServerFacts(job.server_id, job.server.engine, job.engine_version, reason, job.facts_config(),
                        machine=machine_facts())  # fmt: skip
    return facts.to_json()


@dataclass(frozen=True)
class JobFiles:
    """A job's input files by name (``job.input_paths``; a rule's ``input``)."""

    env: str
    model: str
    requests: str
    adapters: list[str]

    @classmethod
    def of(cls, inputs: Any) -> JobFiles:
        """From a rule's ``snakemake.input`` (or any object with these attributes)."""
        return cls(str(inputs.env), str(inputs.model), str(inputs.requests), [str(a) for a in inputs.adapters])

    def read(self, job: ServerJob) -> JobInputs:
        return read_inputs(job, self.env, self.model, self.requests, self.adapters)


def write_files(out_dir: Path, files: dict[str, Json | list[Json]]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        if name.endswith(".jsonl"):
            assert isinstance(content, list), name
            write_jsonl(out_dir / name, content)
        else:
            write_json(out_dir / name, content)


def write_not_run(kind: JobKind, job: ServerJob, out_dir: Path, reason: str) -> None:
    write_files(out_dir, kind.not_run(job, reason))
    (out_dir / "server.log").write_text(f"# {reason}\n")
    log.info("%s: %s", job.server_id, reason)


def run_job(
    kind: JobKind, job: ServerJob, inputs: JobInputs | JobFiles, out_dir: Path, host: str = "127.0.0.1"
) -> JobResult | None:
    """One job end to end: where the engine cannot run here, outputs that say so (None); else a session on the
    job's server, the kind's ``run``, then every file written (the server's log last, moved into place)."""
    if not job.runnable:
        write_not_run(kind, job, out_dir, reason="not run: needs a GPU")
        return None
    if isinstance(inputs, JobFiles):
        inputs = inputs.read(job)
    with ServerSession.open(job, inputs, out_dir, host) as session:
        result = kind.run(session)
    files = result.files()
    if set(files) != set(kind.files):
        raise RuntimeError(f"job kind {kind.name}: wrote {sorted(files)}, declares {sorted(kind.files)}")
    write_files(out_dir, files)
    session.finish()
    return result
