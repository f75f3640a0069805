"""Small file helpers shared by every stage: JSON/JSONL, atomic writes, hashing, logging to a job log."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any, cast


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


class CorruptArtifact(RuntimeError):
    """A built file no longer matches the size or sha256 its manifest recorded."""


def verify_manifest_files(manifest: dict[str, Any], what: str) -> None:
    """Check every file a manifest lists (``files: {name: {bytes, sha256}}`` under ``path``) before it is used,
    so that a truncated or edited adapter fails the job by name instead of being served half-loaded."""
    root = Path(manifest["path"])
    bad = []
    for name, meta in sorted((manifest.get("files") or {}).items()):
        f = root / name
        if not f.exists():
            bad.append(f"{f}: missing")
        elif f.stat().st_size != meta["bytes"]:
            bad.append(f"{f}: {f.stat().st_size} bytes, its manifest says {meta['bytes']}")
        elif sha256_file(f) != meta["sha256"]:
            bad.append(f"{f}: sha256 differs from its manifest")
    if bad:
        raise CorruptArtifact(
            f"{what} changed after it was built (truncated or edited): "
            + "; ".join(bad)
            + f". Rebuild it: snakemake --cores 1 --forcerun {'adapter_build' if 'adapter' in what else 'model_build'}"
        )


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write text so that readers see either the old file or the whole new one, never a partial one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def stored(path: str | Path) -> Path:
    """Where a file is kept: the file itself, else its gzipped copy ``NAME.gz`` where only that exists (a published
    study keeps its large files compressed: tools/rebuild_study.py, dev/study_results.py save)."""
    path = Path(path)
    packed = path.with_name(path.name + ".gz")
    return packed if not path.exists() and packed.exists() else path


def open_stored(path: str | Path, mode: str = "rt") -> IO[Any]:
    """A file opened for reading (``mode`` "rt" or "rb") where ``stored`` finds it, a ``.gz`` decompressed: the one
    way every reader of a study's files takes, so that each reads a file kept plain or gzipped alike."""
    found = stored(path)
    if found.suffix == ".gz":
        return cast(IO[Any], gzip.open(found, mode))
    return open(found, mode)  # noqa: SIM115 - the caller closes it


def gzip_writer(path: str | Path) -> gzip.GzipFile:
    """A gzipped file to write (binary), with no time in its header: the same contents give the same bytes, so a
    study saved or published again changes no file it did not change (``open_stored`` reads it back)."""
    return gzip.GzipFile(path, "wb", compresslevel=9, mtime=0)


def has_json(path: str | Path) -> bool:
    """Whether ``read_json`` finds the file: itself or its gzipped copy."""
    return stored(path).exists()


def read_json(path: str | Path) -> Any:
    """A JSON file, or its gzipped copy ``NAME.gz`` where only that exists (``open_stored``)."""
    with open_stored(path) as f:
        return json.load(f)


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    write_text_atomic(path, "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in rows))


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """The rows of a JSON-lines file, or of its gzipped copy ``NAME.gz`` where only that exists (``open_stored``)."""
    with open_stored(path) as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def setup_job_logging(log_path: str | Path | None, name: str = "lorabench") -> logging.Logger:
    """Send this process's stderr and the logger to the job's log file (first thing a rule's script does)."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers: list[logging.Handler] = []
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        stream = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
        sys.stderr = stream
        handlers.append(logging.StreamHandler(stream))
    # Progress also goes to the terminal that runs snakemake, so long steps are visible.
    console = logging.StreamHandler(sys.__stderr__)
    handlers.append(console)
    for h in handlers:
        h.setFormatter(fmt)
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True)
    return logging.getLogger(name)
