"""dev/carry_pieces.py: a folder split into pieces, carried one transfer at a time and joined on arrival."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from .conftest import ROOT

TOOL = [sys.executable, str(ROOT / "dev/carry_pieces.py")]


def run(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TOOL, *map(str, args)], capture_output=True, text=True, timeout=60)


def test_pieces_carried_one_at_a_time_are_joined_once_all_came(tmp_path):
    kit = tmp_path / ".kit"
    (kit / "c1").mkdir(parents=True)
    (kit / "c1" / "part0").write_bytes(os.urandom(2_500_000))
    (kit / "bin.sh").write_text("echo ready\n")
    assert run("split", kit, tmp_path / "pieces", "--max-mb", 1).returncode == 0
    pieces = sorted(p.name for p in (tmp_path / "pieces").iterdir())
    assert pieces == ["1", "2", "3"]
    far = tmp_path / "far"  # the other machine: each transfer brings one piece folder
    for k, want in (("1", 3), ("3", 3), ("2", 0)):
        carried = tmp_path / "carried"
        shutil.rmtree(carried, ignore_errors=True)
        shutil.copytree(tmp_path / "pieces" / k, carried / k)
        got = run("join", carried, far)
        assert got.returncode == want, got.stdout + got.stderr
        if k == "1":
            assert "1 of 3 pieces here; still to carry: 2 3" in got.stdout
    assert (far / ".kit" / "c1" / "part0").read_bytes() == (kit / "c1" / "part0").read_bytes()
    assert (far / ".kit" / "bin.sh").read_text() == "echo ready\n"
    again = run("join", carried, far)
    assert again.returncode == 0 and "unpacked before" in again.stdout


def test_a_piece_of_another_split_is_refused(tmp_path):
    kit = tmp_path / ".kit"
    kit.mkdir()
    (kit / "a").write_bytes(os.urandom(1_500_000))
    run("split", kit, tmp_path / "old", "--max-mb", 1)
    (kit / "a").write_bytes(os.urandom(1_500_000))
    run("split", kit, tmp_path / "new", "--max-mb", 1)
    mixed = tmp_path / "mixed"
    shutil.copytree(tmp_path / "new" / "1", mixed / "1")
    # piece 2 of the old split renamed under the new split's digest: the whole no longer matches
    shutil.copytree(tmp_path / "new" / "2", mixed / "2")
    (mixed / "2" / "piece.2").write_bytes((tmp_path / "old" / "2" / "piece.2").read_bytes())
    got = run("join", mixed, tmp_path / "far")
    assert got.returncode == 4 and "sha256 differs" in got.stderr
    assert not (tmp_path / "far" / ".kit").exists()


def test_wrong_use_names_the_problem(tmp_path):
    assert "is not a folder" in run("split", tmp_path / "nope", tmp_path / "o").stderr
    got = run("join", tmp_path, tmp_path / "far")
    assert got.returncode == 2 and "no pieces under" in got.stderr


def test_size_says_whether_a_transfer_fits(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 3_000_000)
    fits = run("size", "--limit-mib", 64)
    assert fits.returncode == 0 and "the project's tree" in fits.stdout and ": fits" in fits.stdout
    over = run("size", tmp_path / "big", "--limit-mib", 1)
    assert over.returncode == 1 and "OVER the limit" in over.stdout and "3.0 MB" in over.stdout


def test_size_counts_files_as_the_transfer_packs_them(tmp_path):
    # a thousand files of one byte are a kilobyte of contents but a megabyte packed (a 512-byte header and a
    # 512-byte block each): the transfer's limit applies to the packed count
    many = tmp_path / "many"
    many.mkdir()
    for k in range(1000):
        (many / f"f{k}").write_bytes(b"x")
    got = run("size", many, "--limit-mib", 64)
    assert f"{(1000 * 1024 + 512) / 1e6:8.1f} MB  {many}" in got.stdout
