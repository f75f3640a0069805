"""Study archives: a study's measurements in one compact, checksummed, versioned file.

A published study keeps its findings (README.md), its tables (summary.csv) and its verdicts (verdicts.json) as
plain files, and everything they were computed from in ``archive.tar.xz``: the merged config, every job's burst
rows, per-request records, the engine metrics the analysis reads, facts, runtime-loading, prefix-cache and rate-sweep
results, engine, adapter and model manifests, and the study's notes. Rendered reports and plots are not kept:
``rebuild`` makes the tables, verdicts and report again from the archive alone with this checkout's code.

Layout inside the archive (xz-compressed tar, members sorted, no dates, so the same study gives the same bytes):

- ``{study}/ARCHIVE.json``: ``schema`` (``lorabench.study-archive/1``), the study's name, what was compacted and the
  sha256 of each compacted file as the job wrote it, whether the archive holds results to rebuild from;
- ``{study}/MANIFEST.sha256``: ``sha256  path`` of every other member (``sha256sum -c`` reads it);
- ``{study}/config.json``: the study's merged config; ``{study}/results/...``: the results folder as the report
  rules read it (servers/, runtime_load/, prefix_cache/, rate_sweep/, envs/, adapters/, model/, workload/);
- ``{study}/notes/...``: the study's other files (machine descriptions, job logs, earlier tables).

JSON-lines files and CSV tables are stored column by column (``NAME.columns.json``, ``NAME.columns.csv.json``: the
values of one field side by side compress several times better), and ``read`` gives them back as the files they
stand for; a file whose columns would not read back the same is stored as it is.

What is compacted, and why it changes no figure the analysis computes:

- ``records.jsonl``: each streamed request's per-token gaps (``itl_s``, a list of every inter-token latency) become
  their count, mean and maximum (``itl_n``, ``itl_mean_s``, ``itl_max_s``), and every time in seconds is kept to
  the microsecond (a rate sweep's offsets were written at full float precision). The tables and
  verdicts read the burst rows' ITL figures, computed from the full lists when the job ran; the full lists are what
  a study's own ``results/`` and its bundle keep.
- ``metrics.jsonl``: vLLM's ``lora_requests_info`` keeps one series per adapter set ever seen, each scrape repeating
  all of them; only the rows the queue analysis counts are kept (a set current after its measurement's first
  request, once per measurement and set). Every other series is kept whole.
- server logs are left out (the facts already hold what was parsed from them).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import lzma
import math
import statistics
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = "lorabench.study-archive/1"
NAME = "archive.tar.xz"
INDEX = "ARCHIVE.json"
MANIFEST = "MANIFEST.sha256"
# A study's results folder: what the report rules read, by job kind.
RESULT_DIRS = ("servers", "runtime_load", "prefix_cache", "rate_sweep", "envs", "adapters", "model", "workload")
# Built from the results, never archived: tables, verdicts, queues, capacity and the report.
DERIVED_DIRS = ("summary", "claims", "queues", "capacity", "report")
ITL_FIELDS = ("n", "mean_s", "max_s")
LORA_SETS_METRIC = "vllm:lora_requests_info"


class ArchiveError(ValueError):
    """An archive that cannot be read as it is: a checksum that does not match, an unknown schema."""


def itl_summary(itl: list[float]) -> dict[str, Any]:
    """A request's inter-token gaps as count, mean and maximum (seconds, to the microsecond)."""
    if not itl:
        return {"itl_n": 0, "itl_mean_s": None, "itl_max_s": None}
    return {"itl_n": len(itl), "itl_mean_s": round(statistics.fmean(itl), 6), "itl_max_s": round(max(itl), 6)}


def compact_records(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-request records with each ``itl_s`` list replaced by its summary (``itl_summary``) and every other time
    in seconds (``*_s``) to the microsecond, as the job's own start and end times are recorded: a rate sweep's
    offsets and schedule were kept at full float precision, which is noise below a microsecond and most of an
    archive's size."""
    out = []
    for r in rows:
        if "itl_s" in r:
            r = {k: v for k, v in r.items() if k != "itl_s"} | itl_summary(r["itl_s"] or [])
        r = {k: round(v, 6) if k.endswith("_s") and isinstance(v, float) and math.isfinite(v) else v
             for k, v in r.items()}  # fmt: skip
        out.append(r)
    return out


def compact_metrics(rows: Iterable[dict[str, Any]], records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The metric rows without the ``lora_requests_info`` rows the queue analysis does not count
    (``queues.adapter_sets``): a set current before its measurement's first request (``wall_start`` of the
    records), or one already kept for that measurement."""
    starts: dict[str, float] = {}
    for rec in records:
        if rec.get("wall_start") is not None:
            mid = rec["measurement_id"]
            starts[mid] = min(starts.get(mid, math.inf), float(rec["wall_start"]))
    seen: set[tuple[str, str]] = set()
    out = []
    for r in rows:
        if r.get("name") == LORA_SETS_METRIC:
            running = (r.get("labels") or {}).get("running_lora_adapters", "")
            start = starts.get(r.get("measurement_id", ""))
            key = (r.get("measurement_id", ""), running)
            if not running or start is None or float(r["value"]) < start or key in seen:
                continue
            seen.add(key)
        out.append(r)
    return out


def _jsonl(rows: Iterable[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()


def _rows(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


COLUMNS = "lorabench.columns/1"
COLUMNAR = {".jsonl": ".columns.json", ".csv": ".columns.csv.json"}


def rows_to_columns(rows: list[dict[str, Any]]) -> bytes:
    """JSON-lines rows stored column by column (values of a field side by side compress several times better):
    every field's values in row order, and per row which fields it has (``keysets``: absent is not null)."""
    keys = sorted({k for r in rows for k in r})
    keysets: list[list[str]] = []
    which = []
    for r in rows:
        ks = sorted(r)
        if ks not in keysets:
            keysets.append(ks)
        which.append(keysets.index(ks))
    doc = {"schema": COLUMNS, "rows": len(rows), "keysets": keysets, "row_keyset": which,
           "columns": {k: [r.get(k) for r in rows] for k in keys}}  # fmt: skip
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


def columns_to_rows(data: bytes) -> list[dict[str, Any]]:
    doc = json.loads(data)
    if doc.get("schema") != COLUMNS:
        raise ArchiveError(f"columns of schema {doc.get('schema')!r}, not {COLUMNS}")
    cols, keysets = doc["columns"], doc["keysets"]
    return [{k: cols[k][i] for k in keysets[w]} for i, w in enumerate(doc["row_keyset"])]


def csv_to_columns(data: bytes) -> bytes | None:
    """A CSV table stored column by column (cells as text), or None where writing it back would not give the same
    bytes (then the file is stored as it is)."""
    rows = list(csv.reader(io.StringIO(data.decode())))
    width = len(rows[0]) if rows else 0
    if not rows or any(len(r) != width for r in rows):
        return None
    doc = {"schema": COLUMNS, "csv": [[r[j] for r in rows] for j in range(width)]}
    out = (json.dumps(doc) + "\n").encode()
    return out if columns_to_csv(out) == data else None


def columns_to_csv(data: bytes) -> bytes:
    doc = json.loads(data)
    cols = doc["csv"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for i in range(len(cols[0]) if cols else 0):
        w.writerow([c[i] for c in cols])
    return buf.getvalue().encode()


def to_stored(rel: str, data: bytes) -> tuple[str, bytes]:
    """A file as the archive stores it: JSON lines and CSV tables column by column (``NAME.columns.json``,
    ``NAME.columns.csv.json``) where reading them back gives the same rows (JSON lines: the same values, written
    as ``json.dumps(row, sort_keys=True)``; CSV: the same bytes); any other file as it is."""
    if rel.endswith(".jsonl"):
        rows = _rows(data)
        stored = rows_to_columns(rows)
        if _jsonl(columns_to_rows(stored)) == _jsonl(rows):
            return rel[: -len(".jsonl")] + COLUMNAR[".jsonl"], stored
    elif rel.endswith(".csv") and data:
        stored_csv = csv_to_columns(data)
        if stored_csv is not None:
            return rel[: -len(".csv")] + COLUMNAR[".csv"], stored_csv
    return rel, data


def from_stored(rel: str, data: bytes) -> tuple[str, bytes]:
    """A stored member as the file it stands for (``to_stored`` undone)."""
    if rel.endswith(COLUMNAR[".csv"]):
        return rel[: -len(COLUMNAR[".csv"])] + ".csv", columns_to_csv(data)
    if rel.endswith(COLUMNAR[".jsonl"]):
        return rel[: -len(COLUMNAR[".jsonl"])] + ".jsonl", _jsonl(columns_to_rows(data))
    return rel, data


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Archive:
    """An archive read into memory and verified: its index and its files by path relative to ``{study}/``."""

    path: Path
    study: str
    index: dict[str, Any]
    files: dict[str, bytes]

    @property
    def rebuildable(self) -> bool:
        return bool(self.index.get("rebuildable"))

    @property
    def config(self) -> dict[str, Any]:
        if "config.json" not in self.files:
            raise ArchiveError(f"{self.path}: no config.json (a study of tables only: nothing to rebuild)")
        return json.loads(self.files["config.json"])

    def extract(self, dest: Path) -> Path:
        """Every file under ``dest`` (made if needed); returns ``dest``."""
        for rel, data in self.files.items():
            p = dest / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        return dest


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write(out: Path, study: str, files: dict[str, bytes], index: dict[str, Any], preset: int = 9) -> Path:
    """``files`` (paths relative to the study) as an archive at ``out`` with its index and manifest; the same
    files give the same bytes."""
    index = {"schema": SCHEMA, "study": study, **{k: v for k, v in index.items() if k not in ("schema", "study")}}
    files = dict(to_stored(rel, data) for rel, data in files.items())
    index_bytes = (json.dumps(index, indent=1, sort_keys=True) + "\n").encode()
    members = {INDEX: index_bytes, **files}
    manifest = "".join(f"{sha256(members[p])}  {p}\n" for p in sorted(members))
    members[MANIFEST] = manifest.encode()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    with (
        lzma.open(tmp, "wb", preset=preset) as xz,
        tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel in sorted(members):
            _member(tar, f"{study}/{rel}", members[rel])
    tmp.replace(out)
    return out


def read(path: Path) -> Archive:
    """An archive, verified: every member's checksum, a known major schema version; errors name the file."""
    try:
        with tarfile.open(path, "r:*") as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    except (tarfile.TarError, lzma.LZMAError, EOFError) as e:
        raise ArchiveError(f"{path}: not a readable archive ({e})") from e
    roots = {name.split("/", 1)[0] for name in members}
    if len(roots) != 1:
        raise ArchiveError(f"{path}: expected one top-level folder, found {sorted(roots)}")
    root = roots.pop()
    files = {name.split("/", 1)[1]: data for name, data in members.items()}
    if INDEX not in files:
        raise ArchiveError(f"{path}: no {INDEX} (not a study archive)")
    index = json.loads(files[INDEX])
    schema = str(index.get("schema", ""))
    kind, _, version = schema.partition("/")
    if kind != SCHEMA.split("/")[0] or version.split(".")[0] != SCHEMA.split("/")[1]:
        raise ArchiveError(f"{path}: {INDEX} schema {schema!r} is not one this lorabench reads ({SCHEMA})")
    problems = verify_members(files)
    if problems:
        raise ArchiveError(f"{path} failed verification: {'; '.join(problems[:10])}")
    del files[MANIFEST]
    try:
        files = dict(from_stored(rel, data) for rel, data in files.items())
    except (ArchiveError, ValueError, KeyError, IndexError) as e:
        raise ArchiveError(f"{path}: a column-stored member does not read back ({e})") from e
    return Archive(path, root, index, files)


def verify_members(files: dict[str, bytes]) -> list[str]:
    """What does not match the manifest (empty when every member does)."""
    manifest = files.get(MANIFEST)
    if manifest is None:
        return [f"{MANIFEST} missing"]
    problems, listed = [], set()
    for line in manifest.decode().splitlines():
        if not line.strip():
            continue
        digest, rel = line.split("  ", 1)
        listed.add(rel)
        if rel not in files:
            problems.append(f"missing: {rel}")
        elif sha256(files[rel]) != digest:
            problems.append(f"modified: {rel}")
    problems += [f"not in manifest: {rel}" for rel in sorted(files) if rel not in listed and rel != MANIFEST]
    return problems


def compact_results(results: dict[str, bytes]) -> tuple[dict[str, bytes], dict[str, Any]]:
    """A results folder's files (paths relative to ``results/``, plain, not gzipped) compacted for the archive,
    and what was compacted: per path, the sha256 and size of the file as the job wrote it."""
    out: dict[str, bytes] = {}
    compacted: dict[str, Any] = {}
    for rel, data in sorted(results.items()):
        name = rel.rsplit("/", 1)[-1]
        if name == "server.log":
            compacted[rel] = {"sha256": sha256(data), "bytes": len(data), "kept": "left out"}
            continue
        new = data
        if name == "records.jsonl":
            rows = _rows(data)
            kept = compact_records(rows)
            if _jsonl(kept) != _jsonl(rows):
                new = _jsonl(kept)
        elif name == "metrics.jsonl":
            job = rel.rsplit("/", 1)[0]
            rows = _rows(data)
            kept = compact_metrics(rows, _rows(results.get(f"{job}/records.jsonl", b"")))
            if len(kept) < len(rows):
                new = _jsonl(kept)
        if new is not data:
            compacted[rel] = {"sha256": sha256(data), "bytes": len(data), "kept": "compacted"}
        out[rel] = new
    return out, compacted


@dataclass(frozen=True)
class Rebuilt:
    """What ``rebuild`` wrote under its output folder."""

    summary_csv: Path
    summary_json: Path
    queues: Path
    verdicts: Path
    capacity: Path | None
    report: Path | None


def rebuild(archive: Archive, out: Path, checkout: Path, report: bool = True) -> Rebuilt:
    """The study's tables, queue figures, verdicts, capacity and (``report``) report, computed from the archive
    alone with the code and the claims registry of the lorabench ``checkout``, as the pipeline's summary, queues,
    claims, capacity and report rules compute them from a results folder; written under ``out``."""
    import tempfile

    from . import claims, queues, summary
    from .config import prefix_cache_servers, rate_sweep_mixes, runtime_load_servers

    if not archive.rebuildable:
        raise ArchiveError(f"{archive.path}: holds tables only, no results to rebuild from")
    cfg = archive.config
    servers, engines = sorted(cfg["servers"]), sorted(cfg["engines"])
    for sub in ("summary", "queues", "claims"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lorabench-archive-") as tmp:
        res = archive.extract(Path(tmp)) / "results"
        facts = [str(res / "servers" / s / "facts.json") for s in servers]
        envs = [str(res / "envs" / f"{e}.json") for e in engines]
        adapters = [str(res / "adapters" / f"{a}.json") for a in sorted(cfg["adapters"])]
        model = str(res / "model" / "manifest.json")
        tables = {
            "measurements": out / "summary" / "measurements.csv",
            "summary": out / "summary" / "summary.csv",
            "facts": out / "summary" / "server_facts.csv",
            "json": out / "summary" / "summary.json",
        }
        summary.aggregate(
            measurement_files=[str(res / "servers" / s / "measurements.jsonl") for s in servers],
            fact_files=facts,
            runtime_files=[str(res / "runtime_load" / s / "load.json") for s in runtime_load_servers(cfg)],
            prefix_files=[str(res / "prefix_cache" / s / "prefix.json") for s in prefix_cache_servers(cfg)],
            env_files=envs,
            baseline=cfg.get("baseline"),
            conditions=cfg["conditions"],
            out={k: str(v) for k, v in tables.items()},
        )
        queues_json = out / "queues" / "queues.json"
        queues.aggregate(
            [str(res / "servers" / s / "metrics.jsonl") for s in servers],
            facts,
            cfg["conditions"],
            queues_json,
            [str(res / "servers" / s / "records.jsonl") for s in servers],
        )
        verdicts = out / "claims" / "verdicts.json"
        claims.evaluate_file(
            str(checkout / cfg["claims"]),
            str(tables["json"]),
            model,
            adapters,
            str(verdicts),
            str(checkout / cfg["reference_architecture"]),
            str(queues_json),
            cfg["analogue_model"],
        )
        capacity = None
        sweeps = sorted(rate_sweep_mixes(cfg))
        if sweeps:
            from .capacity import ServerInfo, capacity_model
            from .io import write_json

            mixes = {m: cfg["conditions"][m] for m in cfg["rate_sweep"]["mixes"]}
            capacity = out / "capacity" / "capacity.json"
            (out / "capacity" / "plots").mkdir(parents=True, exist_ok=True)
            files: list[str | Path] = [res / "rate_sweep" / s / "sweep.json" for s in sweeps]
            model_ = capacity_model(
                files, ServerInfo.of_config({"servers": cfg["servers"]}), mixes, out / "capacity" / "plots"
            )
            write_json(capacity, model_)
        html = None
        if report:
            from .report import render_report
            from .report_model import ReportInputs

            inputs = ReportInputs.read(
                study=archive.study,
                config=cfg,
                summary_path=str(tables["json"]),
                verdicts_path=str(verdicts),
                model_path=model,
                adapter_paths=adapters,
                env_paths=envs,
                queues_path=str(queues_json),
                capacity_path=str(capacity) if capacity else None,
            )
            html = out / "report" / "index.html"
            html.parent.mkdir(parents=True, exist_ok=True)
            render_report(
                inputs,
                out_html=html,
                out_provenance=out / "report" / "provenance.json",
                templates=checkout / "report" / "templates",
                checkout=checkout,
                hardware_path=checkout / cfg["hardware_specs"],
            )
    return Rebuilt(tables["summary"], tables["json"], queues_json, verdicts, capacity, html)


# The files of a results folder an archive keeps, by job kind (what the report rules and the estimates read).
RESULT_FILES = {
    "servers": ("measurements.jsonl", "records.jsonl", "metrics.jsonl", "facts.json"),
    "runtime_load": ("load.json", "records.jsonl"),
    "prefix_cache": ("prefix.json", "records.jsonl"),
    "rate_sweep": ("sweep.json", "records.jsonl", "facts.json"),
}


def result_files(results: Path) -> dict[str, bytes]:
    """The files of a results folder an archive keeps (``RESULT_FILES``, engine, adapter and model manifests, the
    request set), by path relative to it; each read plain or from its gzipped copy."""
    from .io import open_stored, stored

    wanted: list[str] = []
    for kind, names in RESULT_FILES.items():
        for job in sorted(p.name for p in (results / kind).glob("*") if p.is_dir()):
            wanted += [f"{kind}/{job}/{n}" for n in names]
    for sub, pattern in (("envs", "*.json"), ("envs", "*.freeze.txt"), ("adapters", "*.json")):
        wanted += sorted(f"{sub}/{p.name.removesuffix('.gz')}" for p in (results / sub).glob(pattern + "*"))
    wanted += ["model/manifest.json", "workload/requests.json"]
    out = {}
    for rel in dict.fromkeys(wanted):
        if stored(results / rel).exists():
            with open_stored(results / rel, "rb") as f:
                out[rel] = f.read()
        elif not rel.startswith("workload/"):
            raise ArchiveError(f"{results / rel} missing: a results folder to archive has every job's outputs")
    return out


def pack_results(
    results: Path,
    config: dict[str, Any],
    study: str,
    out: Path,
    notes: dict[str, bytes] | None = None,
    source: dict[str, Any] | None = None,
    compact: bool = True,
    preset: int = 9,
) -> Path:
    """A results folder (a finished run's ``results/``, or one staged from saved jobs) with its merged ``config``
    as the study archive ``out``; ``notes`` (paths relative to notes/) go in beside them."""
    files, compacted = compact_results(result_files(results)) if compact else (result_files(results), {})
    members = {f"results/{k}": v for k, v in files.items()}
    members["config.json"] = (json.dumps({**config, "study": study}, indent=1, sort_keys=True) + "\n").encode()
    members |= {f"notes/{k}": v for k, v in (notes or {}).items()}
    index = {"rebuildable": True, "compacted": compacted, "source": source or {}}
    return write(out, study, members, index, preset)


def pack_notes(out: Path, study: str, notes: dict[str, bytes], source: dict[str, Any] | None = None) -> Path:
    """A study of tables only (no results to rebuild from) as an archive of its files (records and metrics among
    them compacted as in ``compact_results``)."""
    files, compacted = compact_results(notes)
    members = {f"notes/{k}": v for k, v in files.items()}
    index = {"rebuildable": False, "compacted": {f"notes/{k}": v for k, v in compacted.items()}, "source": source or {}}
    return write(out, study, members, index)


def published_verdicts(verdicts_json: bytes) -> bytes:
    """A verdicts.json as a published study keeps it: the claims the study could judge, one per line (a change of
    one verdict is one changed line), and the ids of those it did not run (``not_run``: no server or condition of
    the study matches them; the full entries, with why, are in the report rendered from the archive)."""
    doc = json.loads(verdicts_json)
    if "claims" in doc and "not_run" not in doc:
        doc["not_run"] = [c["id"] for c in doc["claims"] if c.get("verdict") == "not run"]
        doc["claims"] = [c for c in doc["claims"] if c.get("verdict") != "not run"]
    lines = ["{"]
    for i, (k, v) in enumerate(sorted(doc.items())):
        end = "," if i < len(doc) - 1 else ""
        if isinstance(v, list):
            items = [json.dumps(x, sort_keys=True, ensure_ascii=False) for x in v]
            body = ",\n".join(f"  {x}" for x in items)
            lines.append(f"{json.dumps(k)}: [\n{body}\n]{end}" if items else f"{json.dumps(k)}: []{end}")
        else:
            lines.append(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True, ensure_ascii=False)}{end}")
    lines.append("}")
    out = ("\n".join(lines) + "\n").encode()
    assert json.loads(out) == doc
    return out


def is_study_archive(path: Path) -> bool:
    """Whether ``path`` is a study archive (an xz tar with ``ARCHIVE.json``), not a pipeline bundle."""
    try:
        with tarfile.open(path, "r:*") as tar:
            first = tar.next()
            return first is not None and first.name.endswith(f"/{INDEX}")
    except (tarfile.TarError, lzma.LZMAError, OSError):
        return False


def check_published(folder: Path, checkout: Path, rebuilt_dir: Path) -> list[str]:
    """A published study folder against its archive: the archive verifies, and the tables and verdicts rebuilt
    from it (into ``rebuilt_dir``) equal the folder's summary.csv and verdicts.json. Returns the differences."""
    arch = read(folder / NAME)
    if not arch.rebuildable:  # tables only: the folder's tables are the archived ones
        problems = []
        summary, verdicts = "notes/summary/summary.csv", "notes/claims/verdicts.json"
        if summary in arch.files and (folder / "summary.csv").read_bytes() != arch.files[summary]:
            problems.append(f"{folder}/summary.csv differs from {summary} in {NAME}")
        published = json.loads((folder / "verdicts.json").read_bytes()) if (folder / "verdicts.json").exists() else None
        if verdicts in arch.files and published != json.loads(published_verdicts(arch.files[verdicts])):
            problems.append(f"{folder}/verdicts.json differs from {verdicts} in {NAME}")
        return problems
    built = rebuild(arch, rebuilt_dir, checkout, report=False)
    problems = []
    if built.summary_csv.read_bytes() != (folder / "summary.csv").read_bytes():
        problems.append(f"{folder}/summary.csv differs from the one rebuilt from {NAME}")
    if json.loads(published_verdicts(built.verdicts.read_bytes())) != json.loads(
        (folder / "verdicts.json").read_text()
    ):
        problems.append(f"{folder}/verdicts.json differs from the one rebuilt from {NAME}")
    return problems


def unpack_study(folder: Path, dest: Path) -> Path:
    """A published study folder in the layout of a saved study (its archive's results and notes side by side, as
    tools/estimate_study.py and tools/rebuild_study.py read a study folder) under ``dest``; a folder without an
    archive is returned as it is."""
    if not (folder / NAME).exists():
        return folder
    arch = read(folder / NAME)
    for rel, data in arch.files.items():
        top, _, rest = rel.partition("/")
        if top in ("results", "notes") and rest:
            p = dest / rest
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
    return dest
