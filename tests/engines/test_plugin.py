"""An engine is one module: a toy engine (the fault-injection server behind the Engine interface) dropped into
workflow/lorabench/engines/ of a copy of the repository runs a study to its report, no other file touched."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import yaml

from lorabench.io import read_json

from ..conftest import ROOT, seed_inputs
from ..test_pipeline_e2e import copy_repo, snakemake

pytestmark = [pytest.mark.slow, pytest.mark.full]

# The toy engine's server is the test-support fake server, run as a script from the copy's tests/support/ (it is
# no part of the product package).
TOY = '''"""A toy engine: the fault-injection server of tests/support/fake_server.py behind the Engine interface."""

from __future__ import annotations

from typing import Any

from .base import Engine, ServerSpec, register


@register
class Toy(Engine):
    name = "toy"

    def command(self, spec: ServerSpec, host: str, port: int) -> list[str]:
        return [spec.python, FAKE_SERVER, "--host", host, "--port", str(port)]

    def request_model(self, spec: ServerSpec, adapter: str | None) -> str:
        return spec.served_name if adapter in (None, "base") else adapter

    def load_adapter_request(self, name: str, path: str) -> tuple[str, dict[str, Any]]:
        return "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}

    def unload_adapter_request(self, name: str) -> tuple[str, dict[str, Any]]:
        return "/v1/unload_lora_adapter", {"lora_name": name}

    def version_code(self) -> str:
        return "print('1.0')"
'''


def test_a_new_engine_is_one_module(tmp_path: Path, built_inputs: Path):
    work = copy_repo(tmp_path / "w")
    seed_inputs(work, built_inputs)  # the default study's model, adapters and requests: what is tested is the engine
    toy = TOY.replace("FAKE_SERVER", repr(str(ROOT / "tests/support/fake_server.py")))  # test support: not copied
    (work / "workflow/lorabench/engines/toy.py").write_text(toy)  # the only file added or changed
    cfg = copy.deepcopy(yaml.safe_load((ROOT / "config/config.yaml").read_text()))
    cfg.update(
        study="toy",
        engines={
            "toy": {
                "kind": "toy",
                "version": "1.0",
                "existing": {"python": sys.executable, "env": {"PYTHONPATH": str(work / "workflow")}},
            }
        },
        servers={"toy-off": {"engine": "toy", "lora": False, "conditions": ["base"]}},
        baseline={"server": "toy-off", "condition": "base"},
        bursts=[2],
        repetitions=3,
        max_repetitions=3,
        server_starts=1,
        max_measuring_s=5.0,
    )
    cfg.pop("runtime_load")
    (work / "toy.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    snakemake(work, "--configfile", "toy.yaml", "--replace-workflow-config", timeout=600)
    facts = read_json(work / "results/servers/toy-off/facts.json")
    assert facts["status"] == "ok" and facts["engine"] == "toy" and facts["engine_version"] == "1.0"
    summary = read_json(work / "results/summary/summary.json")
    row = next(r for r in summary["rows"] if r["server"] == "toy-off")
    assert row["status"] == "ok" and row["throughput_median"] > 0
    assert 'id="row-toy-off-base-2"' in (work / "results/report/index.html").read_text()
