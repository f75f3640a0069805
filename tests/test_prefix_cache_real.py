"""Study prefix-cache, CPU-sized, end to end with a real vLLM (CPU build) server: cached prompt tokens per ordered
pair of models, the two claims' computed verdicts and the report's section (slow: about 2 minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorabench.io import read_json

from .test_pipeline_e2e import run_study

pytestmark = [pytest.mark.slow, pytest.mark.full]


@pytest.fixture(scope="module")
def prefix_study(tmp_path_factory: pytest.TempPathFactory, built_inputs: Path) -> Path:
    return run_study(tmp_path_factory.mktemp("prefix-cache"), "config/studies/prefix-cache-cpu.yaml", built_inputs)


def test_every_pair_measured_with_cached_tokens(prefix_study: Path):
    pc = read_json(prefix_study / "results/prefix_cache/lora-2/prefix.json")
    assert pc["status"] == "ok" and pc["errors"] == 0 and pc["cached_tokens_reported"]
    got = {(p["first"], p["second"]): p for p in pc["pairs"]}
    assert set(got) == {("base", "base"), ("a", "a"), ("a", "b"), ("base", "a"), ("a", "base")}
    for p in got.values():
        assert p["repeats"] == 3 and p["first_cached_share"] == 0  # every prefix is new to the server
    # vLLM caches a repeated prefix for the same model, the base model as an adapter
    assert got[("base", "base")]["reused"] and got[("a", "a")]["reused"]
    assert pc["caches_prefixes"] is True and isinstance(pc["separate_per_adapter"], bool)


def test_claims_have_verdicts_and_the_report_answers(prefix_study: Path):
    verdicts = {c["id"]: c for c in read_json(prefix_study / "results/claims/verdicts.json")["claims"]}
    assert verdicts["op-prefix-cache-reuse"]["verdict"] == "reproduced"
    assert verdicts["open-prefix-cache-per-adapter"]["verdict"] in ("reproduced", "contradicted")
    html = (prefix_study / "results/report/index.html").read_text()
    assert "Prefix caching across adapters" in html and "is the prefix cache kept separate per adapter?" in html
