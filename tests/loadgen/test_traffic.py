"""Workloads in the request set: prompts of a length in tokens built with the study's tokenizer (the synthetic
model's, trained here), named workloads per condition, datasets, the request set reproduced from its seed, and
config errors that name the key; the measuring code sends each request's own prompt and length."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import pytest
import yaml

from lorabench.config import ConfigError
from lorabench.engines import ServerSpec, get_engine
from lorabench.job import server_job
from lorabench.loadgen.prompts import HfTokenizer, prompt_of_length
from lorabench.loadgen.traffic import WorkloadError, context_limits, needs_tokenizer
from lorabench.loadgen.workload import REQUESTS_SCHEMA, build_request_set, request_shapes
from lorabench.measure.cycles import Cell, Progress

from ..conftest import ROOT
from ..test_config import check

FIXTURE = "tests/fixtures/chat-small.jsonl"
STUDY = yaml.safe_load((ROOT / "config" / "studies" / "prefill-decode-cpu.yaml").read_text())
WORKLOAD = {"prompt": "Write a long story about a robot.", "max_tokens": 32, "temperature": 0.0, "ignore_eos": True}
WORKLOADS = {
    "long": {"prompt_tokens": {"distribution": "uniform", "min": 200, "max": 400}, "output_tokens": 8},
    "chat": {"dataset": FIXTURE},
}
CONDITIONS = {
    "base": {"adapters": ["base"]},
    "a": {"adapters": ["a"]},
    "base-long": {"adapters": ["base"], "workload": "long"},
    "ab-long": {"adapters": ["a", "b"], "workload": "long"},
    "chat": {"adapters": ["a", "base"], "workload": "chat"},
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> HfTokenizer:
    """The tokenizer the synthetic model ships (model.train_tokenizer, as model_build trains it)."""
    from lorabench.model import train_tokenizer

    d = tmp_path_factory.mktemp("tok")
    train_tokenizer(d, vocab_size=2048, seed=0)
    return HfTokenizer(d)


def rset(tokenizer: HfTokenizer, seed: int = 7, **kw) -> dict:
    with_seed = {**WORKLOAD, "seed": seed}
    return build_request_set(with_seed, CONDITIONS, [4, 8], workloads=WORKLOADS, counter=tokenizer, **kw)


def test_prompts_have_the_length_asked_for(tokenizer: HfTokenizer):
    for n in (1, 7, 64, 333, 1500):
        p = prompt_of_length(tokenizer, n, random.Random(n))
        assert p.tokens_intended == n and p.tokens == n == tokenizer.count(p.text)
        assert prompt_of_length(tokenizer, n, random.Random(n)) == p  # seeded
    assert (
        prompt_of_length(tokenizer, 64, random.Random(1)).text != prompt_of_length(tokenizer, 64, random.Random(2)).text
    )


def test_a_counter_that_cannot_hit_the_length_records_what_it_got():
    class TwoPerWord:
        def count(self, text: str) -> int:
            return 1 + 2 * len(text.split())  # a BOS and two tokens a word: odd lengths only

    p = prompt_of_length(TwoPerWord(), 10, random.Random(0))
    assert (p.tokens_intended, p.tokens) == (10, 9)


def test_model_folder_without_tokenizer_is_named(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}: the model folder has no tokenizer"):
        HfTokenizer(tmp_path)


def test_conditions_of_one_workload_send_the_same_requests(tokenizer: HfTokenizer):
    rs = rset(tokenizer)
    assert rs["schema"] == REQUESTS_SCHEMA == "lorabench.requests/2"
    prompts, sets = rs["prompts"], rs["sets"]

    def shapes(key: str) -> list[tuple[int, int]]:
        return [(r["prompt"], r["max_tokens"]) for r in sets[key]]

    # the adapter assignment is as before: cycle over the condition's adapters
    assert [r["adapter"] for r in sets["ab-long/4"]] == ["a", "b", "a", "b"]
    # one workload: the same prompt and length at each place, whatever the adapters; a burst of 4 is the first 4 of 8
    assert shapes("base-long/8") == shapes("ab-long/8") and shapes("base-long/4") == shapes("base-long/8")[:4]
    assert shapes("base/8") == shapes("a/8") and len({p for p, _ in shapes("base/8")}) == 1  # one fixed prompt
    long = [prompts[p] for p, _ in shapes("base-long/8")]
    assert len({p["text"] for p in long}) == 8  # every long prompt its own: no prefix for the engine to share
    assert all(200 <= p["tokens_intended"] <= 400 and p["tokens"] == p["tokens_intended"] for p in long)
    assert all(m == 8 for _, m in shapes("ab-long/8")) and all(m == 32 for _, m in shapes("base/4"))
    # the fixed prompt is counted too, and the table holds it once
    assert prompts[shapes("base/4")[0][0]] == {
        "text": WORKLOAD["prompt"], "tokens": tokenizer.count(WORKLOAD["prompt"]), "tokens_intended": None, "source": ""
    }  # fmt: skip
    # a dataset: lines in a seeded order, their source recorded, their output lengths as max_tokens
    chat = [(prompts[p], m) for p, m in shapes("chat/8")]
    assert all(p["source"].startswith(f"{FIXTURE}:") for p, _ in chat)
    lines = Path(ROOT / FIXTURE).read_text().splitlines()
    for p, m in chat:
        line = json.loads(lines[int(p["source"].rsplit(":", 1)[1]) - 1])
        assert m == line["output_tokens"]
        assert p["text"] == line["prompt"] if "prompt" in line else p["tokens"] == line["prompt_tokens"]
    w = rs["workloads"]
    assert set(w) == {"default", "long", "chat"} and w["long"]["conditions"] == ["ab-long", "base-long"]
    assert 200 <= w["long"]["prompt_tokens"]["min"] <= w["long"]["prompt_tokens"]["max"] <= 400
    assert w["long"]["prompt_tokens"] == w["long"]["prompt_tokens_intended"]
    assert rs["prompt"] == WORKLOAD["prompt"] and rs["max_tokens"] == 32  # the default's, for runtime loading


def test_the_request_set_is_reproduced_from_its_seed(tokenizer: HfTokenizer, tmp_path: Path):
    from lorabench.model import train_tokenizer

    train_tokenizer(tmp_path, vocab_size=2048, seed=0)  # the same model built again
    first = json.dumps(rset(tokenizer), sort_keys=True)
    assert json.dumps(rset(HfTokenizer(tmp_path)), sort_keys=True) == first
    other = rset(tokenizer, seed=8)
    assert json.dumps(other, sort_keys=True) != first

    def long_lengths(rs: dict) -> list[int]:
        return [rs["prompts"][r["prompt"]]["tokens_intended"] for r in rs["sets"]["base-long/8"]]

    assert long_lengths(other) != long_lengths(json.loads(first))


def test_first_schema_request_sets_still_read():
    old = {"prompt": "x", "max_tokens": 8, "sets": {"a/2": [{"request_id": "a-2-000", "adapter": "a"}] * 2}}
    assert request_shapes(old, old["sets"]["a/2"]) == [("x", 8), ("x", 8)]


def test_the_measuring_code_sends_each_requests_own_prompt(tokenizer: HfTokenizer):
    from lorabench.measure.measurer import requests_for as _requests_for

    rs = rset(tokenizer)
    spec = ServerSpec(
        server_id="s", engine="vllm", python="python", model_path="/m", served_name="m", lora=True,
        adapters={"a": "/a", "b": "/b"},
    )  # fmt: skip
    reqs = _requests_for(get_engine("vllm"), spec, rs, Cell("ab-long", 4, True), "c0")
    rows = rs["sets"]["ab-long/4"]
    assert [(r.prompt, r.max_tokens, r.adapter) for r in reqs] == [
        (rs["prompts"][row["prompt"]]["text"], row["max_tokens"], row["adapter"]) for row in rows
    ]
    assert reqs[0].request_id == "s/c0/ab-long-4-000"


def test_a_prompt_longer_than_the_context_is_named(tokenizer: HfTokenizer):
    with pytest.raises(WorkloadError) as e:
        rset(tokenizer, limits={"chat": (200, "servers.lora-2.args.max_model_len")})
    msg = str(e.value)
    assert msg.startswith("workloads.chat: a prompt of ") and f"({FIXTURE}:" in msg
    assert "the context of 200 tokens (servers.lora-2.args.max_model_len) of condition chat" in msg


def study(**changes) -> dict:
    cfg = copy.deepcopy(STUDY)
    for path, value in changes.items():
        *keys, last = path.split("__")
        node = cfg
        for k in keys:
            node = node[k]
        node[last] = value
    return cfg


def test_the_prefill_study_loads_pairs_within_workloads_and_counts_with_the_tokenizer():
    cfg = check(study())
    assert needs_tokenizer(cfg)
    assert context_limits(cfg)["a-long"] == (2048, "servers.lora-1.args.max_model_len")
    job = server_job(cfg, "lora-1", "cpu")
    assert job.reference == "base" and job.references == {"base-long": "base-long", "a-long": "base-long"}
    assert job.facts_config()["references"] == job.references
    p = Progress(job.reference, job.conditions, job.bursts, job.references)
    assert [(c, d) for (c, _), (d, _), _ in p.comparisons()] == [("a", "base"), ("a-long", "base-long")]
    default = check(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    assert not needs_tokenizer(default) and "references" not in server_job(default, "lora-2", "cpu").facts_config()


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"conditions__a-long__workload": "longer"}, "conditions.a-long.workload: unknown workload 'longer'"),
        (
            {"workloads__long-prompt__prompt_tokens": {"distribution": "uniform", "min": 1024, "max": 2040}},
            "workloads.long-prompt.prompt_tokens: prompts up to 2040 tokens plus outputs up to 16 do not fit the "
            "context of 2048 tokens (servers.lora-1.args.max_model_len) of condition a-long",
        ),
        ({"workloads__long-prompt__prompt": "hello"}, "workloads.long-prompt: give exactly one of prompt"),
        ({"workloads__long-prompt__output_tokens": None}, "workloads.long-prompt: give exactly one of max_tokens"),
        (
            {"workloads__long-prompt": {"dataset": FIXTURE, "max_tokens": 3}},
            "workloads.long-prompt.max_tokens: a dataset",
        ),
        (
            {"workloads__long-prompt": {"dataset": "nope.jsonl"}},
            "workloads.long-prompt.dataset: nope.jsonl: dataset file",
        ),
        (
            {"workloads__long-prompt__prompt_tokens": {"distribution": "uniform", "min": 1024}},
            "workloads.long-prompt.prompt_tokens: distribution uniform needs max",
        ),
        ({"workloads__long-prompt__prompt_tokens": {"distribution": "gamma"}}, "workloads.long-prompt.prompt_tokens"),
        ({"workloads__default": {"prompt": "x", "max_tokens": 3}}, "workloads"),
        ({"workload__prompt_tokens": 100}, "workload: give exactly one of prompt"),
    ],
)
def test_bad_workloads_name_the_key(changes: dict, expected: str):
    cfg = study(**changes)
    if changes.get("workloads__long-prompt__output_tokens", 0) is None:
        del cfg["workloads"]["long-prompt"]["output_tokens"]
    with pytest.raises(ConfigError) as e:
        check(cfg)
    assert expected in str(e.value), str(e.value)


def test_a_dataset_line_longer_than_the_context_is_named_at_load(tmp_path: Path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt_tokens": 100, "output_tokens": 4}\n{"prompt_tokens": 2000, "output_tokens": 64}\n')
    cfg = study(**{"workloads__long-prompt": {"dataset": str(data)}})
    with pytest.raises(ConfigError) as e:
        check(cfg)
    assert f"workloads.long-prompt.dataset: {data}:2: prompt_tokens plus output_tokens (2064)" in str(e.value)
    assert "context of 2048 tokens (servers.lora-1.args.max_model_len)" in str(e.value)
