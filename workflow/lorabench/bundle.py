"""Archive bundles: one tar.gz per study run with every result file and a sha256 manifest; verify and re-render.

Layout inside the archive: ``{study}/MANIFEST.sha256`` (``sha256  path`` per line, like sha256sum) and the files
under ``{study}/`` at their paths relative to the study's working directory (results/..., config/...).
Model weights stay out (adapter and model manifests with their hashes go in).
"""

from __future__ import annotations

import hashlib
import io
import logging
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from .io import read_json, sha256_file

log = logging.getLogger(__name__)
MANIFEST = "MANIFEST.sha256"


def make_bundle(files: list[str], out: Path, study: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    lines = []
    with tarfile.open(tmp, "w:gz") as tar:
        for f in files:
            p = Path(f)
            if p.is_absolute():
                raise ValueError(f"bundle: {f} is not relative to the working directory")
            lines.append(f"{sha256_file(p)}  {p.as_posix()}")
            tar.add(p, arcname=f"{study}/{p.as_posix()}", recursive=False)
        data = ("\n".join(lines) + "\n").encode()
        info = tarfile.TarInfo(f"{study}/{MANIFEST}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)
    log.info("bundle %s: %d files", out, len(files))
    return out


def _open_members(bundle: Path) -> tuple[str, dict[str, bytes]]:
    with tarfile.open(bundle, "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    roots = {name.split("/", 1)[0] for name in members}
    if len(roots) != 1:
        raise ValueError(f"{bundle}: expected one top-level folder, found {sorted(roots)}")
    return roots.pop(), members


def verify_bundle(bundle: Path) -> list[str]:
    """Every checksum of the manifest; returns the problems (empty when intact)."""
    root, members = _open_members(bundle)
    manifest = members.get(f"{root}/{MANIFEST}")
    if manifest is None:
        return [f"{MANIFEST} missing"]
    problems = []
    listed = set()
    for line in manifest.decode().splitlines():
        if not line.strip():
            continue
        digest, path = line.split("  ", 1)
        listed.add(path)
        data = members.get(f"{root}/{path}")
        if data is None:
            problems.append(f"missing: {path}")
        elif hashlib.sha256(data).hexdigest() != digest:
            problems.append(f"modified: {path}")
    for name in members:
        rel = name.split("/", 1)[1]
        if rel != MANIFEST and rel not in listed:
            problems.append(f"not in manifest: {rel}")
    return problems


def render_from_bundle(bundle: Path, out_dir: Path, checkout: Path) -> Path:
    """Re-render the report from the bundle alone (no server, no results folder), with the report templates of
    the lorabench ``checkout``."""
    from .report import render_report
    from .report_model import ReportInputs

    problems = verify_bundle(bundle)
    if problems:
        raise ValueError(f"{bundle} failed verification: {problems}")
    root, members = _open_members(bundle)
    with tempfile.TemporaryDirectory() as tmpd:
        base = Path(tmpd)
        for name, data in members.items():
            p = base / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        r = base / root
        prov: dict[str, Any] = read_json(r / "results/report/provenance.json")
        out_dir.mkdir(parents=True, exist_ok=True)
        html = out_dir / "index.html"
        inputs = ReportInputs.read(
            study=root,
            config=prov["config"],
            summary_path=str(r / "results/summary/summary.json"),
            verdicts_path=str(r / "results/claims/verdicts.json"),
            model_path=str(r / "results/model/manifest.json"),
            adapter_paths=sorted(str(p) for p in (r / "results/adapters").glob("*.json")),
            env_paths=sorted(str(p) for p in (r / "results/envs").glob("*.json")),
            queues_path=str(q) if (q := r / "results/queues/queues.json").exists() else None,
        )
        render_report(
            inputs,
            out_html=html,
            out_provenance=out_dir / "provenance.json",
            templates=checkout / "report" / "templates",
            checkout=checkout,
        )
    return html
