"""Study own-adapters, CPU-sized, end to end with a real vLLM (CPU build) server: two adapters saved by PEFT for
the study's tiny model before it runs, given by path beside a synthetic one, imported, served (the canary finds
each changes the output) and measured per adapter, under the study's fixed prompt and under a dataset workload
(tests/fixtures/chat-small.jsonl), whose prompts of varying lengths the server counted as the request set built
them (slow: a few minutes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lorabench.io import read_json, read_jsonl, sha256_file

from .support.adapters import good
from .test_pipeline_e2e import run_study

pytestmark = [pytest.mark.slow, pytest.mark.full]

OWN = ("support", "legal")
CHAT = ("chat-base", "chat-support", "chat-legal", "chat-support-legal")  # the conditions of workload chat


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
    assert all(r["status"] == 200 for r in recs)
    assert all(r["completion_tokens"] == 32 for r in recs if r["condition"] not in CHAT)  # the fixed workload
    per_adapter = read_json(own_adapters / "results/summary/summary.json")["per_adapter"]
    rows = {(r["condition"], r["adapter"]): r for r in per_adapter if r["server"] == "lora-4"}
    for cond, adapter in [("support", "support"), ("legal", "legal"), ("support-legal-a", "support"),
                          ("support-legal-a", "legal"), ("support-legal-a", "a")]:  # fmt: skip
        assert rows[(cond, adapter)]["requests"] > 0, rows.keys()
    html = (own_adapters / "results/report/index.html").read_text()
    assert "your adapter from" in html and "own-adapters/support" in html


def test_the_dataset_workload_was_sent_with_its_prompt_lengths(own_adapters: Path):
    rset = read_json(own_adapters / "results/workload/requests.json")
    assert rset["workloads"]["chat"]["conditions"] == sorted(CHAT)
    prompts = rset["prompts"]
    rows = {r["request_id"]: r for rows in rset["sets"].values() for r in rows}
    chat_rows = [r for rid, r in rows.items() if rid.startswith("chat-")]
    assert all(prompts[r["prompt"]]["source"].startswith("tests/fixtures/chat-small.jsonl:") for r in chat_rows)
    built = {prompts[r["prompt"]]["tokens"] for r in chat_rows}
    assert len(built) > 1, built  # the dataset's lines: prompts of several lengths
    records = [
        r
        for r in read_jsonl(own_adapters / "results/servers/lora-4/records.jsonl")
        if not r.get("warmup") and r["condition"] in CHAT
    ]
    assert records and all(not r["error"] for r in records)
    for rec in records:  # what the server counted is what the request set built, request by request
        row = rows[rec["request_id"].rsplit("/", 1)[-1]]
        assert rec["prompt_tokens"] == prompts[row["prompt"]]["tokens"], rec
        assert rec["completion_tokens"] == row["max_tokens"], rec
    assert {r["prompt_tokens"] for r in records} == built  # differing across requests, as the dataset's lines
    assert len(records) >= 6 * len(CHAT) * 2 * 4  # 6 cycles, 4 conditions, streamed and not, bursts of 4


def test_the_dataset_workload_is_compared_and_tabled_per_adapter(own_adapters: Path):
    summary = read_json(own_adapters / "results/summary/summary.json")
    cells = {r["condition"]: r for r in summary["rows"] if r["server"] == "lora-4" and r["status"] == "ok"}
    assert {c: cells[c]["workload"] for c in CHAT} == dict.fromkeys(CHAT, "chat")
    assert cells["support"]["workload"] == "default"
    # each mix against the base model of its own workload, paired per cycle
    comps = {(c["condition"], c["reference"]): c for c in summary["comparisons"]}
    assert set(comps) == {
        ("support", "base"), ("legal", "base"), ("support-legal-a", "base"),
        ("chat-support", "chat-base"), ("chat-legal", "chat-base"), ("chat-support-legal", "chat-base"),
    }  # fmt: skip
    assert all(comps[(c, "chat-base")]["paired_by"] == "cycle" for c in CHAT[1:])
    per_adapter = {(r["condition"], r["adapter"]): r for r in summary["per_adapter"] if r["server"] == "lora-4"}
    for key in [("chat-support", "support"), ("chat-legal", "legal"), ("chat-support-legal", "support"),
                ("chat-support-legal", "legal")]:  # fmt: skip
        row = per_adapter[key]
        assert row["requests"] > 0 and row["ttft_median_pooled_ms"] is not None, per_adapter.keys()
    # the report's per-adapter table names the workload of each row (besides the condition's name)
    html = (own_adapters / "results/report/index.html").read_text()
    table = html.split('id="per-adapter"', 1)[1].split("</table>", 1)[0]
    for adapter in OWN:
        row = next(r for r in table.split("<tr>") if ">chat-support-legal" in r and f">{adapter}<" in r)
        assert re.search(r"\bchat\b", re.sub(r"chat-[a-z-]+", "", row)), row
    assert "chat conversations of 1-4 turns" in html
