"""What an engine (or PEFT) would refuse at start stops the config before any job (lorabench.engine_limits), each
error naming the key and the numbers; the engine's own message is quoted beside each case (vLLM 0.32.0, the CPU
build the default study installs; SGLang 0.5.17's ServerArgs and LoRAManager)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from lorabench.code_inputs import import_closure
from lorabench.config import ConfigError
from lorabench.engine_limits import check_engine_limits, engine_limit_problems

from .conftest import ROOT
from .support.adapters import good
from .test_config import DEFAULT, check, snakemake_dry_run


def problems(cfg: dict[str, Any]) -> list[str]:
    return engine_limit_problems(check(cfg))


def test_the_committed_study_configs_pass():
    configs = [ROOT / "config" / "config.yaml", *sorted((ROOT / "config").glob("gpu-*.yaml"))]
    configs += sorted((ROOT / "config" / "studies").glob("*.yaml"))
    assert len(configs) > 10
    for path in configs:
        assert problems(yaml.safe_load(path.read_text())) == [], path.name


def test_a_host_cache_smaller_than_the_slots_is_refused():
    cfg = copy.deepcopy(DEFAULT) | {"servers": _with(DEFAULT, "lora-4", max_cpu_loras=2)}
    # vLLM: "max_cpu_loras (2) must be >= max_loras (4)." (vllm/config/lora.py, LoRAConfig._validate_lora_config)
    assert problems(cfg) == [
        "servers.lora-4.max_cpu_loras: 2 is less than servers.lora-4.max_loras (4): vllm refuses to start (its host "
        "cache must hold every adapter of a batch). Raise max_cpu_loras to 4 or more, or leave it out (it then "
        "equals max_loras)"
    ]
    cfg["servers"]["lora-4"]["max_cpu_loras"] = 4
    assert problems(cfg) == []
    del cfg["servers"]["lora-4"]["max_loras"]  # vLLM's default --max-loras is 1
    cfg["servers"]["lora-4"]["conditions"] = ["base", "a"]
    assert problems(cfg) == []
    with pytest.raises(ConfigError, match=r"what an engine would refuse at start:\n  servers\.lora-2\.max_cpu_loras"):
        check_engine_limits(check(copy.deepcopy(DEFAULT) | {"servers": _with(DEFAULT, "lora-2", max_cpu_loras=1)}))


def _with(cfg: dict[str, Any], server: str, **settings: Any) -> dict[str, Any]:
    servers = copy.deepcopy(cfg["servers"])
    servers[server].update(settings)
    return servers


def test_a_host_cache_on_an_engine_without_one_is_refused():
    # lorabench's SGLang engine, when its server would start: "max_cpu_loras is a vLLM setting; SGLang has none"
    assert problems(copy.deepcopy(DEFAULT) | {"servers": _with(DEFAULT, "sglang-lora-2", max_cpu_loras=4)}) == [
        "servers.sglang-lora-2.max_cpu_loras: sglang has no host adapter cache of its own size (max_cpu_loras is a "
        "vLLM setting): leave it out"
    ]


def test_a_synthetic_rank_above_max_lora_rank_is_refused_where_the_server_serves_it():
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapters"]["c"]["rank"] = 64
    cfg["servers"]["lora-2"].update(adapters=["a", "b"], conditions=["base", "a", "ab", "ab-base"])
    # vLLM: "LoRA rank 64 is greater than max_lora_rank 8." (vllm/lora/peft_helper.py, PEFTHelper.validate_legal);
    # SGLang: "LoRA adapter c with rank 64 is incompatible with the current LoRA memory pool configuration. Please
    # ensure that the LoRA adapter's rank is within the configured `--max-lora-rank` ..." (LoRAManager)
    assert problems(cfg) == [
        f"adapters.c.rank: 64 is above servers.{sid}.max_lora_rank (8), and servers.{sid} serves it: {kind} refuses "
        f"the adapter. Raise servers.{sid}.max_lora_rank to 64 or more, or leave the adapter out of "
        f"servers.{sid}.adapters"
        for sid, kind in (("lora-4", "vllm"), ("sglang-lora-2", "sglang"))
    ]  # not lora-2: it serves a and b only


def test_vllms_default_max_lora_rank_applies_where_none_is_set():
    cfg = copy.deepcopy(DEFAULT)
    for a in ("a", "b", "c"):
        cfg["adapters"][a]["rank"] = 32
    for sid in ("lora-2", "lora-4", "sglang-lora-2"):
        del cfg["servers"][sid]["max_lora_rank"]
    del cfg["runtime_load"]
    # vLLM: "LoRA rank 32 is greater than max_lora_rank 16." (--max-lora-rank defaults to 16); SGLang takes the
    # largest rank of the adapters it loads at start
    got = problems(cfg)
    assert [p.split(":")[0] for p in got] == ["adapters.a.rank", "adapters.b.rank", "adapters.c.rank"] * 2
    assert got[0] == (
        "adapters.a.rank: 32 is above vllm's default max_lora_rank (16; servers.lora-2.max_lora_rank is not set), "
        "and servers.lora-2 serves it: vllm refuses the adapter. Raise servers.lora-2.max_lora_rank to 32 or more, "
        "or leave the adapter out of servers.lora-2.adapters"
    )


def test_a_family_above_max_lora_rank_is_named_once():
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapter_families"] = {"m": {"count": 4, "rank": 64, "seed_base": 100}}
    cfg["conditions"]["many"] = {"family": {"name": "m", "count": 4}}
    cfg["servers"]["lora-4"].update(adapters=["m-000", "m-001", "m-002", "m-003"], conditions=["base", "many"])
    cfg["servers"]["lora-2"]["adapters"] = cfg["servers"]["sglang-lora-2"]["adapters"] = ["a", "b", "c"]
    assert problems(cfg) == [
        "adapter_families.m.rank: 64 (members m-000 .. m-003) is above servers.lora-4.max_lora_rank (8), and "
        "servers.lora-4 serves it: vllm refuses the adapter. Raise servers.lora-4.max_lora_rank to 64 or more, or "
        "leave those members out of servers.lora-4.adapters"
    ]


def test_a_runtime_adapter_above_the_ranks_sglang_infers_at_start_is_refused():
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapters"]["c"]["rank"] = 16
    cfg["runtime_load"]["server"] = ["lora-4", "sglang-lora-2"]
    cfg["servers"]["lora-4"]["max_lora_rank"] = 16
    del cfg["servers"]["sglang-lora-2"]["max_lora_rank"]
    cfg["servers"]["lora-2"].update(adapters=["a", "b"], conditions=["base", "a", "ab", "ab-base"])
    # SGLang without --max-lora-rank sizes its adapter memory from --lora-paths (a and b, rank 8); loading c (rank 16)
    # at run time: "LoRA adapter c with rank 16 is incompatible with the current LoRA memory pool configuration."
    assert problems(cfg) == [
        "adapters.c.rank: 16 (runtime_load.adapter c) is above the largest rank of the adapters servers.sglang-lora-2 "
        "loads at start (8), which sglang takes as its max_lora_rank where servers.sglang-lora-2.max_lora_rank is not "
        "set: sglang refuses the adapter at run time. Set servers.sglang-lora-2.max_lora_rank to 16 or more"
    ]


def test_an_adapter_by_path_above_vllms_default_rank_is_refused(tmp_path: Path):
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapters"]["own"] = {"path": str(good(tmp_path / "own", rank=32))}
    cfg["conditions"]["own"] = {"adapters": ["own"]}
    cfg["servers"]["lora-4"]["conditions"].append("own")
    del cfg["servers"]["lora-4"]["max_lora_rank"]
    cfg["servers"]["lora-2"]["adapters"] = cfg["servers"]["sglang-lora-2"]["adapters"] = ["a", "b", "c"]
    assert problems(cfg) == [
        f"adapters.own: {tmp_path / 'own'}: rank 32 is above servers.lora-4.max_lora_rank (16): that server would "
        "refuse the adapter. Raise servers.lora-4.max_lora_rank to 32 or more, or leave the adapter out of "
        "servers.lora-4.adapters (not set: vllm's default is 16)"
    ]


def test_a_target_module_the_model_lacks_is_refused():
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapters"]["a"]["target_modules"] = ["q_proj", "qkv_proj"]
    cfg["adapter_families"] = {"m": {"count": 2, "rank": 8, "seed_base": 100, "target_modules": ["w1", "w2"]}}
    # PEFT, with no target found: "Target modules {'w1', 'w2'} not found in the base model. Please check the target
    # modules and try again."; with some found, it leaves qkv_proj out and builds a smaller adapter than the config's
    got = problems(cfg)
    assert [p.split(" is")[0].split(" are")[0] for p in got] == [
        "adapters.a.target_modules: qkv_proj",
        "adapter_families.m.target_modules: w1, w2",
    ]
    layers = "embed_tokens, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head"
    assert "the model tiny-qwen3 (qwen3, hidden_size " in got[0] and f"whose layers are {layers}: PEFT" in got[0]


def test_engine_limits_are_not_code_the_measuring_jobs_run():
    """Like adapter_paths: editing these checks reruns no job (the rules' code inputs are their import closures)."""
    for script in ("server_loadtest", "runtime_load", "prefix_cache", "rate_sweep"):
        files = import_closure(ROOT / "workflow" / "scripts" / f"{script}.py", ROOT / "workflow" / "lorabench")
        assert not [f for f in files if f.name in ("engine_limits.py", "adapter_paths.py")], script


def test_snakemake_stops_before_any_job_on_what_an_engine_refuses(tmp_path: Path):
    cfg = copy.deepcopy(DEFAULT)
    cfg["servers"]["lora-4"]["max_cpu_loras"] = 2
    proc = snakemake_dry_run(cfg, tmp_path)
    assert proc.returncode != 0
    assert "servers.lora-4.max_cpu_loras: 2 is less than servers.lora-4.max_loras (4)" in proc.stdout + proc.stderr
    assert "Job stats" not in proc.stdout
