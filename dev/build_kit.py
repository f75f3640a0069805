"""Build the wheel kit of one engine for the lent H200 from its pinned closure (envs/*.txt), so that the GPU runs
exercise exactly the pins a user installs.

  python3 dev/build_kit.py vllm      writes .kit-vllm/   (c1/, c2/, ...: the packed parts; bin/: stage.sh, env.sh)
  python3 dev/build_kit.py sglang    writes .kit-sglang/
  python3 dev/build_kit.py vllm --list   only print the kit's pins (no download)
  python3 dev/build_kit.py vllm --repart recut an existing .kit-vllm/ into parts that fit beside today's tree

The kit is the part of the closure the device image lacks: the packages the engine's server imports that the image
does not have (dev/kit/ENGINE.txt, found by importing the server on a machine without a GPU; see dev/README.md),
plus every package of the image (dev/kit/image.txt) whose pinned version differs from the image's. torch and the
CUDA libraries must be pinned at the image's versions (they are not carried). Each wheel is downloaded with its
pinned hash (``pip download --require-hashes``), installed into site/ for CPython 3.12 on the closure's platform,
slimmed for one Hopper GPU serving a dense bf16 model (vLLM: FA2, MoE and Rust front-end binaries removed;
SGLang: ../shared/gpu/sglang/slim_site.py), packed as xz'd tar and cut into parts of at most --part-mb MiB (a
device call carries the project tree plus one part). On the device: ``bash .kit-ENGINE/bin/stage.sh`` in each
call that carries a part; once all parts are there it unpacks to /tmp/ENGINE-site (dev/device-site.yaml).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "dev"))
from carry_pieces import tree_bytes  # noqa: E402
from pin_env import platform_of, platforms, read_pins  # noqa: E402

PINNED = {"vllm": ROOT / "envs" / "vllm-0.26.0-cu13.txt", "sglang": ROOT / "envs" / "sglang-0.5.17-cu13.txt"}
KIT = ROOT / "dev" / "kit"
NOT_CARRIED = ("torch", "triton", "nvidia-")  # on the image at the pinned versions (checked for torch)
VLLM_DROP = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",  # Hopper runs FA3
    "vllm/_moe_C_stable_libtorch.abi3.so",  # dense model
    "vllm/vllm-rs",  # only with VLLM_USE_RUST_FRONTEND
)


def names(path: Path) -> dict[str, str]:
    """``{name: version or ''}`` of a list file (``name`` or ``name==version`` a line, # comments)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            out[canonicalize_name(name)] = version
    return out


def kit_pins(engine: str) -> dict[str, tuple[str, list[str]]]:
    """The pins (version, hashes) the kit carries: what the server imports and the image lacks, and the image's
    packages pinned at another version than the image's."""
    pins = read_pins(PINNED[engine])
    image = names(KIT / "image.txt")
    if pins.get("torch", ("",))[0] != image["torch"]:
        raise SystemExit(f"{PINNED[engine].name}: torch {pins.get('torch')} is not the image's {image['torch']}")
    wanted = set(names(KIT / f"{engine}.txt"))
    wanted |= {n for n, v in image.items() if n in pins and pins[n][0] != v}
    missing = sorted(wanted - set(pins))
    if missing:
        raise SystemExit(f"{PINNED[engine].name}: not in the closure: {', '.join(missing)}")
    carried = {n: pins[n] for n in sorted(wanted) if not n.startswith(NOT_CARRIED)}
    return carried


def run(*argv: str) -> None:
    print("+", " ".join(argv[:8]), "..." if len(argv) > 8 else "", flush=True)
    subprocess.run(argv, check=True)


def pip_tags(glibc_minor: int) -> list[str]:
    plats = [x for p in platforms(glibc_minor) for x in ("--platform", p)]
    return ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", *plats]


def slim(engine: str, site: Path, shared: Path) -> None:
    if engine == "vllm":
        for rel in VLLM_DROP:
            p = site / rel
            if p.exists():
                print(f"dropped {rel} ({p.stat().st_size / 1e6:.1f} MB)")
                p.unlink()
        for p in (site / "vllm" / "third_party" / "deep_gemm").glob("_C.cpython-31[0134]-*.so"):
            p.unlink()  # builds for other Pythons than 3.12
    else:
        run(sys.executable, str(shared / "sglang" / "slim_site.py"), str(site))


def build(engine: str, part_mb: int, shared: Path, work: Path) -> Path:
    pins = kit_pins(engine)
    _, plat = platform_of(PINNED[engine].with_suffix(".in").read_text())
    req = work / "kit-requirements.txt"
    req.write_text(
        "".join(f"{n}=={v} " + " ".join(f"--hash=sha256:{h}" for h in hs) + "\n" for n, (v, hs) in pins.items())
    )
    wheels, site = work / "wheels", work / "tree" / "site"
    run(sys.executable, "-m", "pip", "download", "-q", "--no-deps", *pip_tags(plat), "--require-hashes", "-r", str(req),
        "-d", str(wheels))  # fmt: skip
    run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", *pip_tags(plat), "--target",
        str(site), *map(str, sorted(wheels.glob("*.whl"))))  # fmt: skip
    slim(engine, site, shared)
    (work / "tree" / "PINS.txt").write_text("".join(f"{n}=={v}\n" for n, (v, _) in pins.items()))
    packed = work / f"{engine}-kit.tar.xz"
    tar = ["tar", "-C", str(work / "tree"), "-cf", "-", "--sort=name", "--owner=0", "--group=0", "--numeric-owner"]
    with open(packed, "wb") as out:
        tar_proc = subprocess.Popen([*tar, "--mtime=2026-01-01 00:00:00", "site", "PINS.txt"], stdout=subprocess.PIPE)
        subprocess.run(["xz", "-9", "-T2"], stdin=tar_proc.stdout, stdout=out, check=True)
        if tar_proc.wait() != 0:
            raise SystemExit("tar failed")
    kit = ROOT / f".kit-{engine}"
    shutil.rmtree(kit, ignore_errors=True)
    (kit / "bin").mkdir(parents=True)
    n = cut(kit, engine, packed.read_bytes(), part_mb)
    shutil.copy(KIT / "stage.sh", kit / "bin" / "stage.sh")
    shutil.copy(KIT / f"env-{engine}.sh", kit / "bin" / "env.sh")
    exclude = ROOT / ".git" / "info" / "exclude"
    listed = exclude.read_text(errors="replace").split() if exclude.is_file() else []
    if exclude.parent.is_dir() and f"/.kit-{engine}/" not in listed:
        with open(exclude, "a") as f:
            f.write(f"/.kit-{engine}/\n")
    print(f"{kit}: {len(pins)} wheels, {packed.stat().st_size / 2**20:.1f} MiB in {n} part(s)")
    return kit


def cut(kit: Path, engine: str, data: bytes, part_mb: int) -> int:
    """The packed kit cut into ``kit/cN/`` parts of at most ``part_mb`` MiB, with the manifest stage.sh checks."""
    for old in kit.glob("c[0-9]*"):
        shutil.rmtree(old)
    size = part_mb * 2**20
    parts = [data[i : i + size] for i in range(0, len(data), size)]
    for i, part in enumerate(parts):
        (kit / f"c{i + 1}").mkdir()
        (kit / f"c{i + 1}" / f"{engine}-kit.tar.xz.part{i}").write_bytes(part)
    (kit / "bin" / "KIT.manifest").write_text(
        f"ENGINE {engine}\nNPARTS {len(parts)}\nSHA256 {hashlib.sha256(data).hexdigest()}\nBYTES {len(data)}\n"
        + "".join(f"PART{i} {hashlib.sha256(part).hexdigest()}\n" for i, part in enumerate(parts))
    )
    return len(parts)


def repart(engine: str, part_mb: int) -> int:
    """Recut an existing kit (the tree grew, so a part no longer fits beside it), checked against its manifest."""
    kit = ROOT / f".kit-{engine}"
    manifest = dict(line.split(" ", 1) for line in (kit / "bin" / "KIT.manifest").read_text().splitlines())
    n = int(manifest["NPARTS"])
    data = b"".join((kit / f"c{i + 1}" / f"{engine}-kit.tar.xz.part{i}").read_bytes() for i in range(n))
    if hashlib.sha256(data).hexdigest() != manifest["SHA256"]:
        raise SystemExit(f"{kit}: its parts do not join to the manifest's sha256: build it again")
    n = cut(kit, engine, data, part_mb)
    shutil.copy(KIT / "stage.sh", kit / "bin" / "stage.sh")  # the device side as this checkout has it
    print(f"{kit}: {len(data) / 2**20:.1f} MiB in {n} part(s) of at most {part_mb} MiB")
    return 0


def default_part_mb() -> int:
    """The largest part that fits one call beside today's tree: 64 MiB less the tree, less 2 MiB to spare."""
    return max(8, int(64 - tree_bytes(ROOT) / 2**20 - 2))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=sorted(PINNED))
    ap.add_argument("--list", action="store_true", help="print the kit's pins and stop")
    ap.add_argument(
        "--part-mb",
        type=int,
        help="largest part (MiB; default: what fits one call beside the tree, 64 MiB less the tree less 2)",
    )
    ap.add_argument("--repart", action="store_true", help="recut the existing kit's parts (no download)")
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "gpu", help="the lab's GPU notes")
    args = ap.parse_args(argv)
    if args.list:
        for n, (v, _) in kit_pins(args.engine).items():
            print(f"{n}=={v}")
        return 0
    part_mb = args.part_mb or default_part_mb()
    if args.repart:
        return repart(args.engine, part_mb)
    with tempfile.TemporaryDirectory() as work:
        build(args.engine, part_mb, args.shared, Path(work))
    return 0


if __name__ == "__main__":
    sys.exit(main())
