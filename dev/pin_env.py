"""Pinned engine environments: resolve an ``envs/NAME.in`` into ``envs/NAME.txt``, the complete closure with hashes,
and check a pinned file against the package registry.

  python3 dev/pin_env.py compile envs/vllm-0.26.0-cu13.in   resolve (uv) for CPython 3.12 on the platform the .in
                                                            names, then take each pin's wheel hashes from the
                                                            registry's JSON index (PEP 691): envs/NAME.txt
  python3 dev/pin_env.py check envs/vllm-0.26.0-cu13.txt    every pin exists on the registry with a wheel for
                                                            CPython 3.12 on that platform, not yanked, and every
                                                            pinned hash is one of that release's files; with
                                                            --resolve also resolves the .in again and lists what moved

Nothing large is downloaded: uv resolves from the wheels' metadata, and the hashes come from the index pages. The
engine_env rule installs the .txt with ``pip install --no-deps``, so the file must hold the whole closure; pip sees
the hashes and checks every wheel it downloads against them.

The .in holds requirement lines and one ``# platform: manylinux_2_X_x86_64`` line (the oldest glibc the closure is
for). Needs ``uv`` (``pip install uv``) for compile and --resolve; the index is ``--index-url`` (default PyPI).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

PYTHON = (3, 12)
INDEX = "https://pypi.org/simple"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
PLATFORM = re.compile(r"^#\s*platform:\s*(manylinux_2_(\d+)_x86_64)\s*$", re.M)
LEGACY = {"manylinux2014_x86_64": 17, "manylinux2010_x86_64": 12, "manylinux1_x86_64": 5}


def platforms(glibc_minor: int) -> list[str]:
    """The platform tags of manylinux x86_64 with glibc 2.``glibc_minor``, newest first (pip's ``--platform``
    takes each one by itself: it does not widen manylinux_2_X to the older ones)."""
    plats = [f"manylinux_2_{m}_x86_64" for m in range(glibc_minor, 4, -1)]
    return plats + [p for p, m in LEGACY.items() if m <= glibc_minor]


def target_tags(glibc_minor: int) -> set[Tag]:
    """Wheel tags CPython 3.12 accepts on manylinux x86_64 with glibc 2.``glibc_minor``."""
    plats = platforms(glibc_minor)
    return set(cpython_tags(PYTHON, abis=["cp312"], platforms=plats)) | set(
        compatible_tags(PYTHON, interpreter="cp312", platforms=plats)
    )


def download_platforms(wheel_names: list[str], glibc_minor: int) -> list[str]:
    """The ``--platform`` values that let ``pip download`` take each of these wheels, newest first."""
    allowed = platforms(glibc_minor)
    seen = {t.platform for fn in wheel_names for t in parse_wheel_filename(fn)[3]}
    return [p for p in allowed if p in seen]


def platform_of(text: str) -> tuple[str, int]:
    m = PLATFORM.search(text)
    if not m:
        raise SystemExit("no '# platform: manylinux_2_X_x86_64' line")
    return m.group(1), int(m.group(2))


def read_pins(path: Path) -> dict[str, tuple[str, list[str]]]:
    """``{normalized name: (version, [sha256, ...])}`` of a pinned requirements file (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = PIN.match(line)
        if not m:
            raise ValueError(f"{path}: not a pin: {line[:80]}")
        name = canonicalize_name(m.group(1))
        if name in pins:
            raise ValueError(f"{path}: {name} pinned twice")
        pins[name] = (m.group(2), HASH.findall(line))
    return pins


def index_files(name: str, index: str = INDEX) -> list[dict]:
    """The files of a project on the index (PEP 691 JSON)."""
    req = urllib.request.Request(f"{index}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return list(json.load(resp)["files"])


def wheels_for(files: list[dict], name: str, version: str, tags: set[Tag]) -> list[dict]:
    """The release's wheels installable on the target (not yanked)."""
    out = []
    for f in files:
        fn = f["filename"]
        if not fn.endswith(".whl") or f.get("yanked"):
            continue
        try:
            wname, wver, _, wtags = parse_wheel_filename(fn)
        except ValueError:
            continue
        if canonicalize_name(wname) == name and str(wver) == version and wtags & tags:
            out.append(f)
    return out


def uv() -> list[str]:
    exe = shutil.which("uv")
    if exe:
        return [exe]
    try:
        subprocess.run([sys.executable, "-m", "uv", "--version"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("uv not found: pip install uv") from None
    return [sys.executable, "-m", "uv"]


def resolve(req_in: Path, index: str) -> dict[str, str]:
    """``{name: version}`` of the closure uv resolves for the .in's platform."""
    plat, _ = platform_of(req_in.read_text())
    argv = [
        *uv(),
        "pip",
        "compile",
        str(req_in),
        "--python-version",
        "3.12",
        "--python-platform",
        "x86_64-" + plat.removesuffix("_x86_64"),
        "--no-header",
        "--no-annotate",
        "--no-config",
        "--quiet",
        "--index-url",
        index,
    ]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    pins = {}
    for line in out.splitlines():
        m = PIN.match(line.strip())
        if m:
            pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def compile_in(req_in: Path, index: str) -> Path:
    text = req_in.read_text()
    plat, minor = platform_of(text)
    tags = target_tags(minor)
    closure = resolve(req_in, index)
    with ThreadPoolExecutor(16) as pool:
        files = dict(zip(closure, pool.map(lambda n: index_files(n, index), closure), strict=True))
    out = req_in.with_suffix(".txt")
    top = [PIN.match(x).group(0) for x in text.splitlines() if PIN.match(x)]  # type: ignore[union-attr]
    chosen = {name: wheels_for(files[name], name, version, tags) for name, version in closure.items()}
    for name, wheels in chosen.items():
        if not wheels:
            raise SystemExit(f"{name}=={closure[name]}: no wheel for CPython 3.12 on {plat} on the index")
    flags = [
        f"--platform {p}" for p in download_platforms([w["filename"] for ws in chosen.values() for w in ws], minor)
    ]
    lines = [
        f"# The complete closure of {top[0]} for CPython 3.12 on {plat} (or newer glibc), each wheel's sha256",
        f"# from the registry: generated from {req_in.name} by `python3 dev/pin_env.py compile {req_in}`.",
        "# The engine_env rule installs it with `pip install --no-deps` into the engine's own venv (pip checks every",
        "# wheel against these hashes). For a machine without network, download its wheels where there is some",
        "# (docs/gpu.md):",
        "#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --require-hashes \\",
        *("#     " + " ".join(flags[i : i + 3]) + " \\" for i in range(0, len(flags), 3)),
        f"#     -r envs/{out.name} -d wheels/{req_in.stem}",
        f"# {len(closure)} packages.",
    ]
    for name, version in sorted(closure.items()):
        wheels = chosen[name]
        lines.append(f"{name}=={version} \\")
        hashes = sorted({w["hashes"]["sha256"] for w in wheels})
        lines += [f"    --hash=sha256:{h}" + (" \\" if i < len(hashes) - 1 else "") for i, h in enumerate(hashes)]
    out.write_text("\n".join(lines) + "\n")
    print(f"{out}: {len(closure)} pins")
    return out


def check(pinned: Path, index: str, again: bool) -> int:
    """Problems found (0: every pin is on the registry as pinned)."""
    req_in = pinned.with_suffix(".in")
    _, minor = platform_of(req_in.read_text())
    tags = target_tags(minor)
    pins = read_pins(pinned)
    with ThreadPoolExecutor(16) as pool:
        files = dict(zip(pins, pool.map(lambda n: index_files(n, index), pins), strict=True))
    problems = []
    for name, (version, hashes) in sorted(pins.items()):
        wheels = wheels_for(files[name], name, version, tags)
        known = {w["hashes"]["sha256"] for w in wheels}
        if not wheels:
            problems.append(f"{name}=={version}: no installable wheel on the registry (missing or yanked)")
        elif not hashes or not set(hashes) <= known:
            problems.append(f"{name}=={version}: pinned hash(es) not among the registry's wheels")
    if again:
        now = resolve(req_in, index)
        for name in sorted(set(now) | set(pins)):
            was = pins[name][0] if name in pins else None
            if now.get(name) != was:
                problems.append(f"{name}: pinned {was}, the registry resolves {now.get(name)}")
    for p in problems:
        print(p)
    print(f"{pinned}: {len(pins)} pins, {len(problems)} problem(s)")
    return len(problems)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("verb", choices=["compile", "check"])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--index-url", default=INDEX)
    ap.add_argument("--resolve", action="store_true", help="check: resolve the .in again and compare")
    args = ap.parse_args(argv)
    if args.verb == "compile":
        for f in args.files:
            compile_in(f, args.index_url)
        return 0
    return 1 if sum(check(f, args.index_url, args.resolve) for f in args.files) else 0


if __name__ == "__main__":
    sys.exit(main())
