"""Study prefill-decode, CPU-sized, end to end with a real vLLM (CPU build) server: two workloads on one server
(the source's short prompt with long outputs, and prompts of 1024-1920 tokens with short outputs), each mix
paired with the base model of its own workload; the prompts the server counted are those the request set built,
long prompts take longer to their first token, and the report names each figure's workload (slow: minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorabench.io import read_json, read_jsonl

from .test_pipeline_e2e import run_study

pytestmark = [pytest.mark.slow, pytest.mark.full]


@pytest.fixture(scope="module")
def prefill(tmp_path_factory: pytest.TempPathFactory, built_inputs: Path) -> Path:
    # 6 cycles (the study's least; it goes on up to 12 while a comparison is wider than its target): the behaviour,
    # not the figures, and CI time is counted
    return run_study(
        tmp_path_factory.mktemp("prefill-decode"), "config/studies/prefill-decode-cpu.yaml", built_inputs,
        max_repetitions=6,
    )  # fmt: skip


def test_servers_count_the_prompts_the_request_set_built(prefill: Path):
    rset = read_json(prefill / "results/workload/requests.json")
    assert rset["schema"] == "lorabench.requests/2"
    prompts = rset["prompts"]
    rows = {r["request_id"]: r for rows in rset["sets"].values() for r in rows}
    long_rows = [r for rid, r in rows.items() if "-long-" in rid]
    assert long_rows and all(1024 <= prompts[r["prompt"]]["tokens_intended"] <= 1920 for r in long_rows)
    # the synthetic tokenizer takes one token a word: every prompt has exactly the length asked for
    assert all(prompts[r["prompt"]]["tokens"] == prompts[r["prompt"]]["tokens_intended"] for r in long_rows)
    assert all(8 <= r["max_tokens"] <= 16 for r in long_rows)
    records = [r for r in read_jsonl(prefill / "results/servers/lora-1/records.jsonl") if not r["error"]]
    checked = 0
    for rec in records:
        row = rows[rec["request_id"].rsplit("/", 1)[-1]]
        assert rec["completion_tokens"] == row["max_tokens"], rec
        if "-long-" in rec["request_id"]:
            assert rec["prompt_tokens"] == prompts[row["prompt"]]["tokens"], rec
            checked += 1
    assert checked >= 6 * 2 * 2 * 4  # 6 cycles at least, 2 long conditions, streamed and not, bursts of 4


def test_long_prompts_take_longer_to_the_first_token(prefill: Path):
    summary = read_json(prefill / "results/summary/summary.json")
    cells = {r["condition"]: r for r in summary["rows"] if r["status"] == "ok"}
    assert set(cells) == {"base", "a", "base-long", "a-long"}
    assert {c: cells[c]["workload"] for c in cells} == {
        "base": "default", "a": "default", "base-long": "long-prompt", "a-long": "long-prompt"
    }  # fmt: skip
    for long, short in (("base-long", "base"), ("a-long", "a")):
        assert cells[long]["ttft_median_ms"] > cells[short]["ttft_median_ms"], (cells[long], cells[short])
        assert cells[long]["prompt_tokens_per_request"] > 10 * cells[short]["prompt_tokens_per_request"]
    # each mix is compared with the base model of its own workload, never across workloads
    comps = {(c["condition"], c["reference"]) for c in summary["comparisons"]}
    assert comps == {("a", "base"), ("a-long", "base-long")}
    phases = {p["condition"]: p for p in summary["phases"]}
    assert phases["a-long"]["reference"] == "base-long" and phases["a"]["reference"] == "base"
    for c in ("a", "a-long"):
        assert phases[c]["ttft_ratio_pct"] is not None and phases[c]["itl_ratio_pct"] is not None, phases[c]
        assert phases[c]["ttft_ratio_lo_pct"] is not None  # paired per cycle: an interval
    html = (prefill / "results/report/index.html").read_text()
    assert "LoRA's cost by phase" in html and "long-prompt" in html and "long prompt, short output" in html
