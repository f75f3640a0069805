"""The server job object: built once from the config, carried as the rule's params, read back unchanged; the
facts it writes keep their keys."""

from __future__ import annotations

import copy
import json

import pytest

from lorabench.config import ConfigError
from lorabench.job import RuntimeLoad, ServerJob, runtime_load_params, server_job
from lorabench.runtime_load import RuntimeLoading
from lorabench.summary import SERVER_KEYS

from .test_config import DEFAULT, check

CFG = check(copy.deepcopy(DEFAULT))


@pytest.mark.parametrize("runtime", [False, True])
def test_params_round_trip_and_are_sorted_json(runtime: bool):
    job = server_job(CFG, "lora-2", "cpu", runtime=runtime)
    text = job.to_json()
    assert ServerJob.from_json(text) == job and ServerJob.from_json(text).to_json() == text
    assert text == json.dumps(json.loads(text), sort_keys=True)
    assert job.server_id == ("lora-2-runtime" if runtime else "lora-2")
    assert ("c" in job.adapters) is not runtime and job.server.runtime_lora is runtime
    assert "runtime_load" not in json.loads(text)  # the kind's settings travel apart (jobs.JobKind)


def test_kind_params_round_trip():
    kind = RuntimeLoading(runtime_load_params(CFG))
    assert RuntimeLoading.from_json(kind.to_json()) == kind and json.loads(kind.to_json())["kind"] == "runtime_load"
    assert kind.params == RuntimeLoad(adapter=CFG["runtime_load"]["adapter"], **{
        k: v for k, v in CFG["runtime_load"].items() if k not in ("adapter", "server")})  # fmt: skip


def test_facts_keep_their_keys():
    job = server_job(CFG, "lora-2", "cpu")
    assert set(job.facts_config()) == {
        "lora", "max_loras", "max_cpu_loras", "max_lora_rank", "adapters", "conditions", "reference", "bursts", "args"
    }  # fmt: skip
    assert job.facts_config()["max_loras"] == 2 and job.facts_config()["args"] == {"max_model_len": 512}
    assert SERVER_KEYS == ("lora", "max_loras", "max_cpu_loras", "max_lora_rank")
    assert job.measurement_facts()["max_cycles"] == CFG["max_repetitions"]


def test_a_server_edit_changes_only_that_servers_params():
    edited = copy.deepcopy(CFG)
    edited["servers"]["lora-4"]["args"]["max_model_len"] = 384
    changed = {
        s for s in CFG["servers"] if server_job(CFG, s, "cpu").to_json() != server_job(edited, s, "cpu").to_json()
    }
    assert changed == {"lora-4"}


def test_a_study_setting_reaches_every_server():
    edited = copy.deepcopy(CFG)
    edited["max_measuring_s"] = 2.0
    assert all(server_job(edited, s, "cpu").max_measuring_s == 2.0 for s in CFG["servers"])


def test_gpu_engine_is_not_runnable_on_cpu():
    assert not server_job(CFG, "sglang-lora-2", "cpu").runnable
    assert server_job(CFG, "sglang-lora-2", "gpu").runnable


def test_unknown_server_is_named():
    with pytest.raises(ConfigError, match="servers.nope"):
        server_job(CFG, "nope", "cpu")


def test_a_bad_params_key_is_named():
    d = json.loads(server_job(CFG, "lora-2", "cpu").to_json())
    d["server"]["max_lora"] = 2
    with pytest.raises(ValueError, match="server.max_lora"):
        ServerJob.from_dict(d)
    del d["server"]["max_lora"], d["server"]["served_name"]
    with pytest.raises(ValueError, match="missing key.*server.served_name"):
        ServerJob.from_dict(d)


def test_study_settings_take_their_defaults_from_the_schema():
    import yaml

    from lorabench.config import SCHEMA
    from lorabench.job import study_settings

    props = yaml.safe_load(SCHEMA.read_text())["properties"]
    server = server_job(CFG, "lora-2", "cpu").server
    bare = ServerJob(server=server)
    normalized = {"max_repetitions", "harness"}  # 0 means exactly `repetitions`; the harness's own defaults filled
    for name in set(study_settings()) - normalized:
        assert getattr(bare, name) == props[name]["default"], name  # one source of defaults: the schema
    assert bare.max_repetitions == props["repetitions"]["default"] and props["max_repetitions"]["default"] == 0
    assert bare.load is not ServerJob(server=server).load  # a fresh copy each time
