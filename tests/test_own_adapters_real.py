"""Study own-adapters, CPU-sized, end to end with a real vLLM (CPU build) server: two adapters saved by PEFT for
the study's tiny model before it runs, given by path beside a synthetic one, imported, served (the canary finds
each changes the output) and measured per adapter (slow: about 3 minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorabench.io import read_json, read_jsonl, sha256_file

from .support.adapters import good
from .test_pipeline_e2e import run_study

pytestmark = pytest.mark.slow

OWN = ("support", "legal")


@pytest.fixture(scope="module")
def own_adapters(tmp_path_factory: pytest.TempPathFactory, built_inputs: Path) -> Path:
    work = tmp_path_factory.mktemp("own-adapters")
    for i, name in enumerate(OWN):  # where the study's config looks for them: own-adapters/NAME
        good(work / "own-adapters" / name, index=i + 1)
    return run_study(work, "config/studies/own-adapters-cpu.yaml", built_inputs)


def test_own_adapters_are_imported_and_recorded(own_adapters: Path):
    for name in OWN:
        m = read_json(own_adapters / f"results/adapters/{name}.json")
        src = own_adapters / "own-adapters" / name
        assert m["source"] == "path" and m["source_path"] == str(src.resolve())
        assert m["path"] == str((own_adapters / f"results/adapters/{name}").resolve())
        assert m["files"]["adapter_model.safetensors"]["sha256"] == sha256_file(src / "adapter_model.safetensors")
        assert (m["rank"], m["target_modules"], m["trainable_parameters"]) == (
            8,
            ["q_proj", "k_proj", "v_proj", "o_proj"],
            28_672,
        )
    assert read_json(own_adapters / "results/adapters/a.json").get("source") is None  # the synthetic one


def test_own_adapters_were_served_and_measured(own_adapters: Path):
    facts = read_json(own_adapters / "results/servers/lora-4/facts.json")
    canary = facts["probes"]["canary"]["adapters"]
    assert set(canary) == {"support", "legal", "a"} and all(c["differs"] for c in canary.values()), canary
    recs = [r for r in read_jsonl(own_adapters / "results/servers/lora-4/records.jsonl") if not r.get("warmup")]
    assert {r["model"] for r in recs} == {"tiny-qwen3", "support", "legal", "a"}
    assert all(r["status"] == 200 and r["completion_tokens"] == 32 for r in recs)
    per_adapter = read_json(own_adapters / "results/summary/summary.json")["per_adapter"]
    rows = {(r["condition"], r["adapter"]): r for r in per_adapter if r["server"] == "lora-4"}
    for cond, adapter in [("support", "support"), ("legal", "legal"), ("support-legal-a", "support"),
                          ("support-legal-a", "legal"), ("support-legal-a", "a")]:  # fmt: skip
        assert rows[(cond, adapter)]["requests"] > 0, rows.keys()
    html = (own_adapters / "results/report/index.html").read_text()
    assert "your adapter from" in html and "own-adapters/support" in html
