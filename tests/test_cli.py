"""The ``lorabench`` command line: its version, and exit codes distinct for usage errors (2), configs that cannot run
(3) and checks that fail (1); ``check-config`` refuses what a run would refuse before any job, naming the key."""

from __future__ import annotations

import copy
import re
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from lorabench import cli

from .conftest import ROOT
from .test_config import DEFAULT


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse: --help, --version, usage errors
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]):
    code, out, _ = run(["--version"], capsys)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert code == 0 and out == f"lorabench {metadata.version('lorabench')}\n"
    assert metadata.version("lorabench") == pyproject


def test_version_falls_back_to_pyproject_where_the_package_is_not_installed(monkeypatch: pytest.MonkeyPatch):
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(cli.metadata, "version", missing)
    assert cli.version() == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    monkeypatch.setattr(cli, "PYPROJECT", ROOT / "no-such-pyproject.toml")
    assert cli.version() == "unknown"


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]):
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    for n, what in cli.EXIT_CODES.items():
        assert f"{n} {what}" in text
    assert (cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE, cli.EXIT_CONFIG) == (0, 1, 2, 3)
    assert "exit codes" in (cli.__doc__ or "").lower() and "Exit codes" in cli.__doc__


@pytest.mark.parametrize("argv", [["nope"], [], ["check-config"], ["bundle", "check", "x"], ["--verison"]])
def test_a_usage_error_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]):
    code, _, err = run(argv, capsys)
    assert code == cli.EXIT_USAGE and "usage: lorabench" in err


def test_a_bundle_that_does_not_verify_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    junk = tmp_path / "junk.tar.gz"
    junk.write_text("not a tar file")
    code, _, err = run(["bundle", "verify", str(junk)], capsys)
    assert code == cli.EXIT_FAILED and f"{junk}: FAILED" in err and "not a readable bundle" in err


def _config(tmp_path: Path, change: Any) -> Path:
    cfg = copy.deepcopy(DEFAULT)
    change(cfg)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_check_config_ok_exits_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.chdir(ROOT)  # the config names its files relative to the checkout, as a study does
    code, out, _ = run(["check-config", "config/config.yaml"], capsys)
    assert (code, out) == (0, "config/config.yaml: OK\n")


def test_check_config_warns_where_cycles_are_too_few_to_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.chdir(ROOT)
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg.update(repetitions=3, max_repetitions=3)
    path = tmp_path / "three.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code, out, err = run(["check-config", str(path)], capsys)
    assert code == 0 and out == f"{path}: OK\n"
    assert f"{path}: warning: max_repetitions: 3 cycles at most, fewer than the 6 a paired interval needs" in err
    cfg.update(max_repetitions=30)
    path.write_text(yaml.safe_dump(cfg))
    _, _, err = run(["check-config", str(path)], capsys)
    assert "warning: repetitions: 3, fewer than the 6 cycles a paired interval needs" in err


def _existing(cfg: dict[str, Any]) -> None:
    cfg["engines"]["vllm-cpu"]["existing"] = {"python": "/nonexistent/bin/python"}


def _context(cfg: dict[str, Any]) -> None:
    cfg["workload"] = {"prompt_tokens": 500, "max_tokens": 32, "seed": 1}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda c: c.update(bursts_per_measurement=3), "unknown key(s): bursts_per_measurement (replaced by repeti"),
        (lambda c: c["servers"]["lora-4"].update(max_cpu_loras=2), "servers.lora-4.max_cpu_loras: 2 is less than "),
        (lambda c: c["adapters"]["c"].update(rank=64), "adapters.c.rank: 64 is above servers.lora-2.max_lora_rank"),
        (
            lambda c: c["adapters"]["a"].update(target_modules=["qkv_proj"]),
            "adapters.a.target_modules: qkv_proj is not a layer of the model",
        ),
        # the python of an existing installation, for an engine this machine runs (vllm-cpu needs no GPU)
        (_existing, "engines.vllm-cpu.existing.python: /nonexistent/bin/python does not exist"),
        # vLLM would answer each request: "The decoder prompt (length 500) plus the number of requested output
        # tokens ... is longer than the maximum model length of 512" (vllm/v1/engine/input_processor.py)
        (_context, "prompts up to 500 tokens plus outputs up to 32 do not fit the context of 512 tokens"),
        # a co-resident group the workflow refuses (lorabench.groups), as a run would before any job
        (lambda c: c.update(groups={"g": {"servers": ["lora-2"]}}), "groups.g.servers: a group needs at least two"),
    ],
)
def test_check_config_exits_3_naming_the_key(
    change: Any, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    path = _config(tmp_path, change)
    monkeypatch.chdir(ROOT)
    code, out, err = run(["check-config", str(path)], capsys)
    assert code == cli.EXIT_CONFIG and not out
    assert err.startswith(f"{path}: ") and expected in err, err


def test_check_config_of_a_file_that_cannot_be_read_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    code, _, err = run(["check-config", str(tmp_path / "missing.yaml")], capsys)
    assert code == cli.EXIT_CONFIG and "cannot be read: No such file or directory" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("study: [unclosed\n")
    code, _, err = run(["check-config", str(bad)], capsys)
    assert code == cli.EXIT_CONFIG and err.startswith(f"{bad}: not YAML")


def test_license_and_citation():
    lic = (ROOT / "LICENSE").read_text()
    assert re.search(r"Apache License\s+Version 2\.0, January 2004", lic) and "END OF TERMS AND CONDITIONS" in lic
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["title"] == "lorabench" and cff["type"] == "software"
    assert cff["license"] == "Apache-2.0" and cff["message"] and cff["authors"] == [{"name": "lorabench developers"}]
