"""Faults a user meets with real vLLM (CPU build) servers: a port already taken, a runtime load of a path that
does not exist (refused, 404), a request without the server's API key. Uses the engine environment, model and
adapters of the default study (the session's `study` fixture)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import aiohttp
import pytest

import lorabench.session as session_module
from lorabench.engines import ServerSpec, get_engine
from lorabench.io import read_json
from lorabench.loadgen.client import make_session
from lorabench.measure.probes import canary
from lorabench.runtime_load import load_adapter
from lorabench.server import ServerStartError
from lorabench.session import engine_server

pytestmark = [pytest.mark.slow, pytest.mark.full]


def spec_of(study: Path, **kw) -> ServerSpec:
    env = read_json(study / "results/envs/vllm-cpu.json")
    model = read_json(study / "results/model/manifest.json")
    return ServerSpec(
        server_id=kw.pop("server_id", "fault"),
        engine="vllm",
        python=env["python"],
        env={**env.get("env", {}), "VLLM_CPU_KVCACHE_SPACE": "1"},
        model_path=model["path"],
        served_name=model["name"],
        args={"max_model_len": 256},
        **kw,
    )


def test_port_in_use_fails_with_the_engines_own_message(study: Path, tmp_path: Path, monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    monkeypatch.setattr(session_module, "free_port", lambda host: port)
    srv = engine_server(get_engine("vllm"), spec_of(study, lora=False, adapters={}), "127.0.0.1", tmp_path / "l", None)
    try:
        with pytest.raises(ServerStartError) as e, srv:
            srv.wait_ready(300)
    finally:
        taken.close()
    assert "exited with code" in str(e.value) and "address already in use" in str(e.value).lower()


def test_runtime_load_of_a_missing_path_is_caught_and_a_keyless_request_refused(study: Path, tmp_path: Path):
    a = read_json(study / "results/adapters/a.json")["path"]
    spec = spec_of(study, lora=True, adapters={"a": a}, max_loras=2, max_lora_rank=8, runtime_lora=True)
    engine = get_engine("vllm")
    srv = engine_server(engine, spec, "127.0.0.1", tmp_path / "l", None, api_key="per-job-key")
    ghost = str(tmp_path / "no-such-adapter")

    async def go() -> tuple[int, int, str]:
        async with aiohttp.ClientSession() as anon:
            body = {"model": spec.served_name, "prompt": "hi", "max_tokens": 2}
            async with anon.post(srv.base_url + "/v1/completions", json=body) as r:
                keyless = r.status
        async with make_session(2, srv.api_key) as s:
            await canary(s, srv.base_url, engine, spec, ["a"])  # a real adapter passes
            _t, status, text = await load_adapter(s, srv.base_url, engine, "ghost", ghost, {"ghost": ghost})
            return keyless, status, text

    with srv:
        srv.wait_ready(300)
        keyless, status, text = asyncio.run(go())
    assert keyless == 401
    # vLLM loads a runtime adapter when asked (/v1/load_lora_adapter preloads it into the engine): reading the
    # missing adapter_config.json raises FileNotFoundError in the worker, answered as LoRAAdapterNotFoundError,
    # 404 (vllm/lora/worker_manager.py, vllm/entrypoints/openai/models/serving.py); the message's path may be
    # masked (sanitize_message writes /tmp/... as <path>).
    assert status == 404, (status, text)
    assert "Loading lora ghost failed: No adapter found for " in text and "NotFoundError" in text, text
