"""The pinned engine closures under envs/: every entry pinned with its wheels' sha256 (the engine_env rule installs
them with --no-deps, so pip checks each wheel), the engine and torch at the versions the configs and the lent
H200's image need, and the H200 kits taken from them. Asking the registry about every pin is
``dev/pin_env.py check`` (network; run here with LORABENCH_REGISTRY=1)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "dev"))
import build_kit  # noqa: E402
import pin_env  # noqa: E402

PINNED = sorted((ROOT / "envs").glob("*-cu13.txt"))
ENGINE = re.compile(r"^(vllm|sglang)-([\d.]+)-cu13$")


def entries(path: Path) -> list[str]:
    """The file's requirement entries, continuation lines joined."""
    text = re.sub(r"\s*\\\n\s*", " ", path.read_text())
    return [x.strip() for x in text.splitlines() if x.strip() and not x.strip().startswith("#")]


def test_both_gpu_engines_are_pinned():
    assert {p.name for p in PINNED} == {"vllm-0.26.0-cu13.txt", "sglang-0.5.17-cu13.txt"}


@pytest.mark.parametrize("path", PINNED, ids=lambda p: p.name)
def test_every_entry_is_pinned_with_hashes(path: Path):
    rows = entries(path)
    assert len(rows) > 150
    names = []
    for row in rows:
        m = re.fullmatch(r"([a-z0-9][a-z0-9.-]*)==(\S+)((?: --hash=sha256:[0-9a-f]{64})+)", row)
        assert m, f"{path.name}: not 'name==version --hash=sha256:...': {row[:100]}"
        names.append(m.group(1))
    assert len(names) == len(set(names)), "a package pinned twice"
    assert names == sorted(names)
    pins = pin_env.read_pins(path)
    engine, version = ENGINE.match(path.stem).groups()  # type: ignore[union-attr]
    assert pins[engine][0] == version
    assert pins["torch"][0] == "2.11.0"  # the CUDA 13 build both engines pin, and the H200 image's
    assert any(n.startswith("nvidia-cuda-runtime") for n in pins), "the CUDA libraries are part of the closure"


@pytest.mark.parametrize("path", PINNED, ids=lambda p: p.name)
def test_the_closure_holds_its_input_and_says_how_to_download_it(path: Path):
    req_in = path.with_suffix(".in")
    plat, _ = pin_env.platform_of(req_in.read_text())
    pins = pin_env.read_pins(path)
    for line in req_in.read_text().splitlines():
        m = pin_env.PIN.match(line)
        if m:
            assert pins[pin_env.canonicalize_name(m.group(1))][0] == m.group(2), line
    head = path.read_text().split("\n\n")[0]
    assert plat in head and "--require-hashes" in head and f"-r envs/{path.name}" in head


def test_gpu_configs_name_these_files_at_the_same_versions():
    for cfg_path in (ROOT / "config").rglob("*.yaml"):
        cfg = yaml.safe_load(cfg_path.read_text())
        for eng in (cfg or {}).get("engines", {}).values():
            req = eng.get("requirements", "")
            if req.endswith("-cu13.txt"):
                kind, version = ENGINE.match(Path(req).stem).groups()  # type: ignore[union-attr]
                assert (eng["kind"], eng["version"]) == (kind, version), cfg_path.name


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_h200_kit_is_taken_from_the_closure(engine: str):
    pins = pin_env.read_pins(build_kit.PINNED[engine])
    kit = build_kit.kit_pins(engine)
    assert engine in kit and "torch" not in kit
    assert all(kit[n] == pins[n] for n in kit)  # the same versions and hashes


def test_a_kit_recut_joins_to_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(build_kit, "ROOT", tmp_path)
    kit = tmp_path / ".kit-vllm"
    (kit / "bin").mkdir(parents=True)
    data = os.urandom(5 * 2**20 + 123)
    assert build_kit.cut(kit, "vllm", data, 3) == 2
    assert build_kit.repart("vllm", 1) == 0
    parts = sorted(kit.glob("c*/vllm-kit.tar.xz.part*"), key=lambda p: int(p.name.rsplit("part", 1)[1]))
    assert len(parts) == 6 and b"".join(p.read_bytes() for p in parts) == data
    assert "NPARTS 6" in (kit / "bin" / "KIT.manifest").read_text()
    parts[0].write_bytes(b"x")  # a damaged part is refused, not cut again
    with pytest.raises(SystemExit, match="sha256"):
        build_kit.repart("vllm", 2)


def test_stage_leaves_out_a_part_of_an_earlier_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The device's checkout keeps the kit folders of earlier calls: after a recut, the old cut's c3/ still holds a
    part named like one of the new cut's. stage.sh stages a part only when its sha256 is the manifest's."""
    import io
    import shutil
    import subprocess
    import tarfile
    import uuid

    engine = f"t{uuid.uuid4().hex[:10]}"  # the kit's /tmp folders are named after it: one of this test's own
    payload = os.urandom(2_500_000)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:xz") as tar:
        for name, data in (("site/blob.bin", payload), ("PINS.txt", b"x==1\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    monkeypatch.setattr(build_kit, "ROOT", tmp_path)
    kit, device = tmp_path / f".kit-{engine}", tmp_path / "device" / f".kit-{engine}"
    (kit / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "dev/kit/stage.sh", kit / "bin" / "stage.sh")

    def carry(*folders: str) -> subprocess.CompletedProcess[str]:
        for f in ("bin", *folders):  # each named folder replaces its copy there; the others stay
            shutil.rmtree(device / f, ignore_errors=True)
            shutil.copytree(kit / f, device / f)
        return subprocess.run(["bash", str(device / "bin" / "stage.sh")], capture_output=True, text=True)

    try:
        assert build_kit.cut(kit, engine, raw.getvalue(), 1) == 3
        assert carry("c3").returncode == 3  # the old cut's third part, staged
        assert build_kit.repart(engine, 2) == 0  # recut: c1 (part0), c2 (part1); the device keeps the old c3
        got = carry("c1")
        assert got.returncode == 3 and "KIT PARTIAL: 1 of 2 parts" in got.stdout
        (device / "c2").mkdir()  # the old cut's c2 as an earlier call left it: part1 of another size
        (device / "c2" / f"{engine}-kit.tar.xz.part1").write_bytes(b"old")
        got = carry()
        assert got.returncode == 3 and f"left out c2/{engine}-kit.tar.xz.part1: a part of another cut" in got.stdout
        got = carry("c2")
        assert got.returncode == 0 and "KIT READY" in got.stdout, got.stdout + got.stderr
        assert Path(f"/tmp/{engine}-site/blob.bin").read_bytes() == payload
    finally:
        for d in (f"/tmp/{engine}-kit", f"/tmp/{engine}-site"):
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.skipif(os.environ.get("LORABENCH_REGISTRY") != "1", reason="asks the registry: LORABENCH_REGISTRY=1")
@pytest.mark.parametrize("path", PINNED, ids=lambda p: p.name)
def test_every_pin_is_on_the_registry_as_pinned(path: Path):
    assert pin_env.check(path, pin_env.INDEX, again=False) == 0
