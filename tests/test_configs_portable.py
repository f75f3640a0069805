"""Every study config under config/ loads with the project's own validation and names nothing of one machine; a
site's installations come from an overlay (docs/site-overlay.yaml), and an ``existing.python`` that is not there
stops the config with the key and the path."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import update_config

from lorabench.config import ConfigError, check_existing_pythons, load_and_check

from .conftest import ROOT

CONFIGS = sorted(p for p in (ROOT / "config").rglob("*.yaml") if "study" in (yaml.safe_load(p.read_text()) or {}))
GPU = [p for p in CONFIGS if all(e.get("requires_gpu") for e in yaml.safe_load(p.read_text())["engines"].values())]
OVERLAY = ROOT / "docs" / "site-overlay.yaml"
# A machine's folder, a home folder or a climb out of the repository, in a value or a comment (URL paths such as
# /metrics are not folders).
OUTSIDE = re.compile(
    r"(?:^|[\s:'\"(=\[{,])((?:/(?:opt|tmp|usr|home|root|mnt|srv|scratch|data|var|work|gpfs|lustre)/)\S*|~/\S*|\.\./\S*)"
)


def strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in strings(k) + strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return [node] if isinstance(node, str) else []


def test_the_study_configs_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in CONFIGS}
    assert {"config/config.yaml", "config/gpu-h200.yaml", "config/gpu-h200-both.yaml"} <= names
    assert len(GPU) >= 8


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_config_validates_and_names_no_path_outside_the_repository(path: Path, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = path.read_text()
    cfg = load_and_check(yaml.safe_load(text))
    for s in strings(cfg):
        if "/" in s and " " not in s:
            assert not s.startswith(("/", "~")), f"{path.name}: absolute path {s}"
            assert (ROOT / s).resolve().is_relative_to(ROOT), f"{path.name}: {s} is outside the repository"
    found = [m.group(1) for line in text.splitlines() for m in OUTSIDE.finditer(line)]
    assert not found, f"{path.name}: paths outside the repository: {found}"
    for eid, eng in cfg["engines"].items():
        assert "existing" not in eng or "/" not in eng["existing"]["python"], f"{path.name}: engines.{eid}.existing"
        if eng.get("requirements"):
            assert (ROOT / eng["requirements"]).is_file()


@pytest.mark.parametrize("path", GPU, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_gpu_config_installs_pinned_closures_and_takes_a_site_overlay(path: Path, monkeypatch):
    monkeypatch.chdir(ROOT)
    base = yaml.safe_load(path.read_text())
    for eng in base["engines"].values():
        assert eng["requirements"].startswith("envs/") and eng["requirements"].endswith("-cu13.txt")
        assert eng["python_version"] == "3.12" and eng["requires_gpu"]
    merged = copy.deepcopy(base)
    overlay = yaml.safe_load(OVERLAY.read_text())
    update_config(merged, {"engines": {e: v for e, v in overlay["engines"].items() if e in base["engines"]}})
    cfg = load_and_check(merged)  # no GPU here: engines that need one are not checked
    assert all(cfg["engines"][e]["existing"]["python"].startswith("/usr/local/lorabench/") for e in base["engines"])
    with pytest.raises(
        ConfigError, match=r"engines\.\w+\.existing\.python: /usr/local/lorabench/\w+/bin/python does not"
    ):
        check_existing_pythons(cfg, hardware="gpu")


def _engine(python: str, **kw: Any) -> dict[str, Any]:
    return {"engines": {"e": {"kind": "vllm", "version": "1", "existing": {"python": python}, **kw}}}


def test_existing_python_is_checked_naming_the_key_and_the_path(tmp_path):
    check_existing_pythons(_engine(sys.executable))
    check_existing_pythons(_engine(Path(sys.executable).name))  # a command on PATH
    missing = tmp_path / "venv" / "bin" / "python"
    with pytest.raises(ConfigError, match=rf"engines\.e\.existing\.python: {re.escape(str(missing))} does not exist"):
        check_existing_pythons(_engine(str(missing)))
    plain = tmp_path / "python"
    plain.write_text("not a program")
    with pytest.raises(ConfigError, match=rf"engines\.e\.existing\.python: {re.escape(str(plain))} is not an exec"):
        check_existing_pythons(_engine(str(plain)))
    with pytest.raises(ConfigError, match=r"engines\.e\.existing\.python: 'no-such-python3' is not a command"):
        check_existing_pythons(_engine("no-such-python3"))
    # an engine that needs a GPU is checked only where there is one
    check_existing_pythons(_engine(str(missing), requires_gpu=True), hardware="cpu")
    with pytest.raises(ConfigError, match="does not exist"):
        check_existing_pythons(_engine(str(missing), requires_gpu=True), hardware="gpu")


def test_dry_run_of_the_gpu_study_with_a_site_overlay_lists_every_job_without_a_gpu(tmp_path):
    for d in ("config", "envs"):
        shutil.copytree(ROOT / d, tmp_path / d)
    shutil.copy(OVERLAY, tmp_path / "site.yaml")
    argv = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "-s", str(ROOT / "workflow" / "Snakefile")]
    argv += ["--configfile", "config/gpu-h200-both.yaml", "site.yaml", "--replace-workflow-config"]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", proc.stdout, re.M))
    assert counts["engine_env"] == "2" and counts["server_loadtest"] == "6" and counts["runtime_load"] == "2"
    for rule in ("model_build", "adapter_build", "summary_aggregate", "claims_evaluate", "report_render"):
        assert rule in counts, proc.stdout[-3000:]
    assert counts["total"] == "21"
