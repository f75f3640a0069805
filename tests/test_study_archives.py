"""Study archives (lorabench.archive): what they keep and leave out, their checks, and the committed studies.

The committed studies are the only files under studies/ a test reads: each study's archive verifies and the tables
and verdicts rebuilt from it equal the ones committed beside it. The size test keeps the tree a device call carries
and a new user clones small."""

from __future__ import annotations

import io
import json
import lzma
import subprocess
import tarfile
from pathlib import Path

import pytest

from lorabench import archive
from lorabench.engines import get_engine
from lorabench.queues import adapter_sets

from .conftest import ROOT

BUDGET_BYTES = 15_000_000
FILE_LIMIT_BYTES = 2_000_000
STUDIES = sorted(p.parent for p in (ROOT / "studies").rglob(archive.NAME))


def _tree_files() -> dict[str, int]:
    """Tracked files and files git would track (not ignored), with their sizes."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    sizes = {}
    for name in out.decode().split("\0"):
        p = ROOT / name
        if name and p.is_file():
            sizes[name] = p.stat().st_size
    return sizes


def test_the_tree_fits_its_budget():
    sizes = _tree_files()
    total = sum(sizes.values())
    shares: dict[str, int] = {}
    for name, size in sizes.items():
        parts = name.split("/")
        key = "/".join(parts[:2]) if parts[0] == "studies" and len(parts) > 2 else parts[0]
        shares[key] = shares.get(key, 0) + size
    print(f"\ntracked tree: {total / 1e6:.2f} MB of {BUDGET_BYTES / 1e6:.0f} MB")
    for key, size in sorted(shares.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {size / 1e6:7.2f} MB  {100 * size / total:5.1f} %  {key}")
    big = {n: s for n, s in sizes.items() if s > FILE_LIMIT_BYTES}
    assert not big, f"files over {FILE_LIMIT_BYTES / 1e6:.0f} MB: {big}"
    assert total <= BUDGET_BYTES, f"the tree is {total / 1e6:.2f} MB, over its {BUDGET_BYTES / 1e6:.0f} MB budget"


def test_a_study_keeps_only_its_findings_tables_and_archive():
    allowed = {"README.md", "summary.csv", "verdicts.json", archive.NAME, "report-findings.png"}
    tracked = subprocess.run(["git", "ls-files", "studies"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert STUDIES, "no study archive under studies/"
    extra = [f for f in tracked if Path(f).name not in allowed]
    assert not extra, f"files a study folder should keep in its archive: {extra[:10]}"
    for f in tracked:
        if f.endswith(".png"):
            assert (ROOT / f).stat().st_size <= 400_000, f"{f}: a README's picture stays small"


# `make test` rebuilds one study (a few seconds) and verifies every archive; `make test-all` rebuilds them all
QUICK = {"h200-8b"}


def test_every_committed_archive_verifies():
    for folder in STUDIES:
        arch = archive.read(folder / archive.NAME)  # checksums, format version, column-stored members
        assert arch.index["schema"] == archive.SCHEMA
        assert (folder / "summary.csv").exists() or not arch.rebuildable, folder


@pytest.mark.parametrize(
    "folder",
    [pytest.param(f, marks=() if f.name in QUICK else pytest.mark.full) for f in STUDIES],
    ids=lambda p: str(p.relative_to(ROOT / "studies")),
)
def test_a_committed_study_is_what_its_archive_rebuilds(folder: Path, tmp_path: Path):
    assert archive.check_published(folder, ROOT, tmp_path) == []


# --- the format ---


def test_records_keep_each_requests_itl_figures():
    rows = [{"request_id": "r1", "itl_s": [0.01, 0.02, 0.03, 0.04], "ttft_s": 0.1}, {"request_id": "r2", "ttft_s": 1}]
    out = archive.compact_records(rows)
    assert "itl_s" not in out[0] and out[1] == rows[1]
    assert out[0]["itl_n"] == 4 and out[0]["itl_max_s"] == 0.04 and out[0]["itl_mean_s"] == 0.025
    assert out[0]["ttft_s"] == 0.1
    assert archive.itl_summary([])["itl_n"] == 0


def _lora_rows():
    rows = []
    # a scrape repeats every set ever seen, valued with when it was last current
    for t, mid in ((100.0, "base/3/0"), (110.0, "a/3/0"), (120.0, "ab/3/0")):
        for running, last in (("", 90.0), ("a", 105.0 if t < 110 else 111.0), ("a,b", 121.0 if t >= 120 else 50.0)):
            labels = {"running_lora_adapters": running, "waiting_lora_adapters": "", "max_lora": "2"}
            rows.append({"name": archive.LORA_SETS_METRIC, "labels": labels, "measurement_id": mid, "t": t,
                         "value": last})  # fmt: skip
            rows.append(dict(rows[-1]))  # scraped twice in the burst
        rows.append({"name": "vllm:num_requests_running", "labels": {}, "measurement_id": mid, "t": t, "value": 1.0})
    records = [{"measurement_id": m, "wall_start": s} for m, s in (("base/3/0", 99.0), ("a/3/0", 109.0))]
    records.append({"measurement_id": "ab/3/0", "wall_start": 119.5})
    return rows, records


def test_metrics_keep_what_the_queue_analysis_counts():
    rows, records = _lora_rows()
    kept = archive.compact_metrics(rows, records)
    assert len(kept) < len(rows)
    assert sum(r["name"] == "vllm:num_requests_running" for r in kept) == 3
    starts = {r["measurement_id"]: r["wall_start"] for r in records}
    engine = get_engine("vllm")
    assert adapter_sets(kept, engine, starts) == adapter_sets(rows, engine, starts)


def _results(tmp_path: Path) -> Path:
    res = tmp_path / "results"
    job = res / "servers" / "s1"
    job.mkdir(parents=True)
    rows, records = _lora_rows()
    (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = [dict(r, itl_s=[0.01, 0.02]) for r in records]
    (job / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (job / "measurements.jsonl").write_text('{"burst": 3}\n')
    (job / "facts.json").write_text('{"server": "s1"}\n')
    (job / "server.log").write_text("INFO ready\n")
    for sub, name in (("envs", "vllm.json"), ("adapters", "a.json"), ("model", "manifest.json")):
        (res / sub).mkdir(parents=True, exist_ok=True)
        (res / sub / name).write_text("{}\n")
    return res


def test_an_archive_is_the_same_bytes_each_time_and_says_what_it_compacted(tmp_path: Path):
    res = _results(tmp_path)
    one = archive.pack_results(res, {"servers": {}}, "s", tmp_path / "1" / archive.NAME, {"machine.txt": b"H100\n"})
    two = archive.pack_results(res, {"servers": {}}, "s", tmp_path / "2" / archive.NAME, {"machine.txt": b"H100\n"})
    assert one.read_bytes() == two.read_bytes()
    arch = archive.read(one)
    assert arch.study == "s" and arch.rebuildable and archive.is_study_archive(one)
    assert set(arch.index["compacted"]) == {"servers/s1/records.jsonl", "servers/s1/metrics.jsonl"}
    assert "results/servers/s1/server.log" not in arch.files and arch.files["notes/machine.txt"] == b"H100\n"
    assert json.loads(arch.files["config.json"])["study"] == "s"


def _rewrite(src: Path, dst: Path, change) -> None:
    with tarfile.open(src, "r:xz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    change(members)
    with lzma.open(dst, "wb") as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_changed_file_or_an_unknown_version_is_refused_naming_the_archive(tmp_path: Path):
    good = archive.pack_results(_results(tmp_path), {"servers": {}}, "s", tmp_path / archive.NAME)
    bad = tmp_path / "bad.tar.xz"
    _rewrite(good, bad, lambda m: m.__setitem__("s/results/servers/s1/facts.json", b'{"server": "s2"}\n'))
    with pytest.raises(archive.ArchiveError, match=r"bad\.tar\.xz failed verification: modified: results/servers/s1"):
        archive.read(bad)
    newer = tmp_path / "newer.tar.xz"

    def bump(m: dict) -> None:
        index = json.loads(m["s/ARCHIVE.json"])
        m["s/ARCHIVE.json"] = json.dumps({**index, "schema": "lorabench.study-archive/2"}).encode()

    _rewrite(good, newer, bump)
    with pytest.raises(
        archive.ArchiveError, match=r"newer\.tar\.xz: ARCHIVE\.json schema 'lorabench\.study-archive/2'"
    ):
        archive.read(newer)
    (tmp_path / "junk.tar.xz").write_bytes(b"not an archive")
    with pytest.raises(archive.ArchiveError, match="junk.tar.xz: not a readable archive"):
        archive.read(tmp_path / "junk.tar.xz")


def test_tables_are_stored_by_column_and_read_back_the_same():
    rows = [{"a": 1, "b": float("nan"), "c": [0.5]}, {"a": 2, "b": None}, {"a": 3}]
    name, stored = archive.to_stored("servers/s/records.jsonl", archive._jsonl(rows))
    assert name == "servers/s/records.columns.json"
    assert archive.from_stored(name, stored) == ("servers/s/records.jsonl", archive._jsonl(rows))
    table = b"server,burst,x\ns1,3,0.5\ns2,48,\n"
    name, stored = archive.to_stored("summary/summary.csv", table)
    assert archive.from_stored(name, stored) == ("summary/summary.csv", table)
    odd = b"a,b\r\n1,2\r\n"  # not as csv.writer writes it here: kept as it is
    assert archive.to_stored("x.csv", odd) == ("x.csv", odd)
