"""Convert a study folder published before study archives (servers/, summary/, claims/, report/ ... committed as
files) into the archive layout: README.md, summary.csv, verdicts.json and archive.tar.xz (lorabench.archive).

The results are staged as tools/rebuild_study.py stages them (the report rules' view, servers not measured listed as
such), packed with the merged config the study's report recorded (report/provenance.json), and the tables and
verdicts rebuilt from the archive alone; the script prints how they differ from the folder's committed ones (the
code may have grown columns since the study was last rendered) and writes the rebuilt ones. A folder without a
rendered report (tables only, or saved jobs without a config) is archived as notes. Nested study folders
(SUB/summary or SUB/report inside) are converted on their own first.

usage: .venv/bin/python tools/archive_study.py STUDY_DIR... [--dry-run]
       .venv/bin/python tools/archive_study.py --refresh STUDY_DIR...   (tables again from the archives)
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
sys.path.insert(0, str(ROOT / "tools"))

import pandas as pd  # noqa: E402
from rebuild_study import NOT_MEASURED, stage  # noqa: E402

from lorabench import archive  # noqa: E402
from lorabench.config import schema_default  # noqa: E402

KEEP = ("README.md", "summary.csv", "verdicts.json", archive.NAME, "report-findings.png")
JOB_DIRS = archive.RESULT_DIRS + archive.DERIVED_DIRS


def is_study(folder: Path) -> bool:
    """A study's folder (a rendered one, or saved jobs with their model's manifest), not a folder of job logs."""
    return any((folder / d).is_dir() for d in ("summary", "report")) or (
        (folder / "model").is_dir() and any((folder / d).is_dir() for d in ("servers", "rate_sweep"))
    )


def plain(path: Path) -> tuple[str, bytes]:
    data = path.read_bytes()
    if path.suffix == ".gz":
        return path.name[:-3], gzip.decompress(data)
    return path.name, data


def notes_of(folder: Path, skip_dirs: set[Path]) -> dict[str, bytes]:
    """Every file of the folder an archive keeps as notes: not a kept file, not a results or derived folder (when
    ``skip_dirs`` names them), not a nested study."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or any(d in p.parents for d in skip_dirs):
            continue
        rel = p.relative_to(folder)
        if len(rel.parts) == 1 and rel.name in KEEP:
            continue
        name, data = plain(p)
        out[str(rel.parent / name) if rel.parent != Path(".") else name] = data
    return out


def compare_tables(old: Path, new: Path) -> str:
    a, b = pd.read_csv(old), pd.read_csv(new)
    lines = [f"rows {len(a)} -> {len(b)}"]
    added, removed = sorted(set(b.columns) - set(a.columns)), sorted(set(a.columns) - set(b.columns))
    if added or removed:
        lines.append(f"columns added {added} removed {removed}")
    key = [c for c in ("server", "condition", "burst", "workload") if c in a.columns and c in b.columns]
    a, b = a.set_index(key).sort_index(), b.set_index(key).sort_index()
    if list(a.index) != list(b.index):
        lines.append("ROWS DIFFER")
        return "; ".join(lines)
    moved = []
    for c in sorted(set(a.columns) & set(b.columns)):
        x, y = a[c], b[c]
        num = pd.api.types.is_numeric_dtype
        if num(x) and num(y) and not pd.api.types.is_bool_dtype(x) and not pd.api.types.is_bool_dtype(y):
            same = ((x - y).abs() <= 1e-9 * (x.abs() + 1)) | (x.isna() & y.isna())
        else:
            same = (x.astype(str) == y.astype(str)) | (x.isna() & y.isna())
        if not same.all():
            moved.append(f"{c} ({int((~same).sum())} rows)")
    lines.append("figures unchanged" if not moved else f"CHANGED: {', '.join(moved)}")
    return "; ".join(lines)


def compare_verdicts(old: Path, new: Path) -> str:
    def by_id(p: Path) -> dict[str, str]:
        d = json.loads(p.read_text())
        rows = d.get("claims", d) if isinstance(d, dict) else d
        return {v["id"]: v.get("verdict") for v in rows} if isinstance(rows, list) else {}

    a, b = by_id(old), by_id(new)
    changed = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
    return f"{len(b)} verdicts, " + ("none changed" if not changed else f"CHANGED {changed}")


def convert(folder: Path, dry_run: bool) -> None:
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in JOB_DIRS):
        if is_study(sub):
            convert(sub, dry_run)
    nested = {p for p in folder.iterdir() if p.is_dir() and (p / archive.NAME).exists()}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    source = {"converted_from": f"studies/{folder.relative_to(ROOT / 'studies')} at commit {commit}"}
    prov = folder / "report" / "provenance.json"
    out = folder / archive.NAME
    old_summary, old_verdicts = folder / "summary" / "summary.csv", folder / "claims" / "verdicts.json"
    with tempfile.TemporaryDirectory(prefix="archive-study-") as tmp:
        t = Path(tmp)
        measured = any((folder / "servers").glob("*/measurements.jsonl*"))
        if prov.exists() and measured:
            cfg = json.loads(prov.read_text())["config"]
            # a config merged before these keys existed: the schema's defaults, as loading it now would give
            for key in ("claims", "reference_architecture", "hardware_specs", "analogue_model"):
                cfg.setdefault(key, schema_default(key))
            res = t / "res"
            for p in folder.rglob("*"):
                rel = p.relative_to(folder)
                if p.is_file() and rel.parts[0] in archive.RESULT_DIRS:
                    name, data = plain(p)
                    (res / rel.parent).mkdir(parents=True, exist_ok=True)
                    (res / rel.parent / name).write_bytes(data)
            # a job saved before its records and metrics were kept (h200-8b-b48's SGLang servers): empty ones,
            # as the study's report was built (no queue figures, no TTFT tail for those servers)
            for job in list((res / "servers").iterdir()) if (res / "servers").is_dir() else []:
                if json.loads((job / "facts.json").read_text()).get("status") == NOT_MEASURED:
                    shutil.rmtree(job)  # a server not measured yet: staged as such again
                    continue
                for name in ("records.jsonl", "metrics.jsonl", "server.log"):
                    if (job / "facts.json").exists() and not (job / name).exists():
                        (job / name).write_text("")
                        print(f"{folder.name}: servers/{job.name}/{name} was not kept: archived empty")
            staged = t / "staged"
            stage(cfg, res, staged)
            notes = notes_of(folder, {folder / d for d in JOB_DIRS} | nested)
            archive.pack_results(staged, cfg, cfg["study"], t / archive.NAME, notes, source)
            built = archive.rebuild(archive.read(t / archive.NAME), t / "built", ROOT, report=False)
            # the same results packed whole (nothing compacted): the tables and verdicts must come out the same
            full = archive.pack_results(staged, cfg, cfg["study"], t / "full.tar.xz", notes, source, False, 0)
            whole = archive.rebuild(archive.read(full), t / "whole", ROOT, report=False)
            same = whole.summary_csv.read_bytes() == built.summary_csv.read_bytes()
            same_v = json.loads(whole.verdicts.read_text()) == json.loads(built.verdicts.read_text())
            print(
                f"{folder.name}: compacted against whole: summary.csv {'identical' if same else 'DIFFERS'}, "
                f"verdicts {'identical' if same_v else 'DIFFER'}"
            )
            if not (same and same_v):
                raise SystemExit(f"{folder}: compaction changed a figure")
            print(f"{folder.name}: summary {compare_tables(old_summary, built.summary_csv)}")
            print(f"{folder.name}: verdicts {compare_verdicts(old_verdicts, built.verdicts)}")
            new_summary: bytes | None = built.summary_csv.read_bytes()
            new_verdicts: bytes | None = archive.published_verdicts(built.verdicts.read_bytes())
        else:
            notes = notes_of(folder, nested)
            if not notes:  # a folder of nested studies and their README: nothing of its own to archive
                return
            archive.pack_notes(t / archive.NAME, folder.name, notes, source)
            table = old_summary if old_summary.exists() else folder / "summary.csv"
            new_summary = table.read_bytes() if table.exists() else None
            new_verdicts = archive.published_verdicts(old_verdicts.read_bytes()) if old_verdicts.exists() else None
            print(f"{folder.name}: tables only ({len(notes)} files as notes)")
        size = (t / archive.NAME).stat().st_size
        print(f"{folder.name}: {archive.NAME} {size / 1e6:.2f} MB")
        if dry_run:
            return
        keep_png = folder / "report-findings.png"
        tracked = subprocess.run(["git", "ls-files", str(folder)], cwd=ROOT, capture_output=True, text=True).stdout
        for name in tracked.split():
            p = ROOT / name
            if any(d in p.parents for d in nested) or p.parent == folder and p.name in KEEP:
                continue
            p.unlink(missing_ok=True)  # the index is left alone: `git add -A studies/` records the change
        for d in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
            if d not in nested and not any(n in d.parents for n in nested) and not any(d.iterdir()):
                d.rmdir()
        shutil.copy(t / archive.NAME, out)
        if new_summary is not None:
            (folder / "summary.csv").write_bytes(new_summary)
        if new_verdicts is not None:
            (folder / "verdicts.json").write_bytes(new_verdicts)
        del keep_png


def refresh(folder: Path) -> None:
    """The folder's summary.csv and verdicts.json rebuilt from its archive with this checkout's code and claims
    (after a change of the analysis that moves a published figure); prints what moved."""
    arch = archive.read(folder / archive.NAME)
    if not arch.rebuildable:
        print(f"{folder.name}: tables only, nothing to rebuild")
        return
    with tempfile.TemporaryDirectory(prefix="archive-study-") as tmp:
        built = archive.rebuild(arch, Path(tmp), ROOT, report=False)
        print(f"{folder.name}: summary {compare_tables(folder / 'summary.csv', built.summary_csv)}")
        print(f"{folder.name}: verdicts {compare_verdicts(folder / 'verdicts.json', built.verdicts)}")
        shutil.copy(built.summary_csv, folder / "summary.csv")
        (folder / "verdicts.json").write_bytes(archive.published_verdicts(built.verdicts.read_bytes()))


def repack(folder: Path) -> None:
    """The folder's archive written again with this checkout's compaction (records, metrics; the sha256 of each
    file as its job wrote it stays as the first conversion recorded it)."""
    arch = archive.read(folder / archive.NAME)
    files = {k: v for k, v in arch.files.items() if k != archive.INDEX}
    index = dict(arch.index)
    compacted = dict(index.get("compacted") or {})
    for top in ("results", "notes"):
        part = {k.split("/", 1)[1]: v for k, v in files.items() if k.startswith(f"{top}/")}
        new, done = archive.compact_results(part)
        for rel, data in new.items():
            files[f"{top}/{rel}"] = data
        for rel, entry in done.items():
            key = rel if top == "results" else f"notes/{rel}"
            compacted.setdefault(key, entry)
    index["compacted"] = compacted
    before = (folder / archive.NAME).stat().st_size
    archive.write(folder / archive.NAME, arch.study, files, index)
    print(f"{folder}: {before / 1e6:.2f} -> {(folder / archive.NAME).stat().st_size / 1e6:.2f} MB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", type=Path, nargs="+")
    ap.add_argument("--dry-run", action="store_true", help="print what would change; write nothing")
    ap.add_argument(
        "--refresh", action="store_true", help="rebuild the tables of converted studies from their archives"
    )
    ap.add_argument("--repack", action="store_true", help="write converted studies' archives again (compaction)")
    args = ap.parse_args()
    for s in args.study:
        if args.repack:
            for folder in sorted({p.parent for p in s.resolve().rglob(archive.NAME)}):
                repack(folder)
            continue
        if args.refresh:
            for folder in sorted({p.parent for p in s.resolve().rglob(archive.NAME)}):
                refresh(folder)
            continue
        convert(s.resolve(), args.dry_run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
