"""SGLang engine: command lines against SGLang's documented ServerArgs flags, adapter naming (BASE:ADAPTER).

SGLang does not import without a GPU here, so the flags are checked against the names its ``ServerArgs``
documents (server_args.py of 0.5.x): model-path, served-model-name, host, port, enable-lora, lora-paths,
max-loras-per-batch, max-lora-rank, lora-target-modules, enable-metrics, context-length, mem-fraction-static.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lorabench.engines import ServerSpec, get_engine

DOCUMENTED = {
    "--model-path",
    "--served-model-name",
    "--host",
    "--port",
    "--enable-lora",
    "--lora-paths",
    "--max-loras-per-batch",
    "--max-lora-rank",
    "--lora-target-modules",
    "--enable-metrics",
    "--context-length",
    "--mem-fraction-static",
}
SPEC = ServerSpec(
    server_id="s",
    engine="sglang",
    python="python3",
    env={},
    model_path="/m",
    served_name="qwen",
    lora=True,
    adapters={"a": "/ad/a", "b": "/ad/b"},
    max_loras=2,
    max_lora_rank=16,
    args={"context_length": 4096, "mem_fraction_static": 0.8},
)


def test_command_uses_documented_flags_only():
    argv = get_engine("sglang").command(SPEC, "127.0.0.1", 30000)
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    flags = {a for a in argv if a.startswith("--")}
    assert flags <= DOCUMENTED, flags - DOCUMENTED
    joined = " ".join(argv)
    assert "--enable-lora --max-loras-per-batch 2 --max-lora-rank 16 --lora-paths a=/ad/a b=/ad/b" in joined


def test_adapter_selected_as_base_colon_adapter():
    e = get_engine("sglang")
    assert e.request_model(SPEC, "a") == "qwen:a"
    assert e.request_model(SPEC, "base") == "qwen"
    assert e.load_adapter_request("c", "/ad/c")[0] == "/load_lora_adapter"


def test_vllm_only_setting_refused():
    from dataclasses import replace

    with pytest.raises(ValueError, match="max_cpu_loras is a vLLM setting"):
        get_engine("sglang").check(replace(SPEC, max_cpu_loras=4))


def test_log_facts_from_recorded_h200_lines():
    # Lines SGLang 0.5.17 wrote on an H200 in this project's run (sglang-lora-2: 2 slots, bursts up to 48).
    text = (Path(__file__).parent / "sglang_h200_log_lines.txt").read_text()
    f = get_engine("sglang").parse_log(text)
    assert f["kv_cache_tokens"] == 1145202
    assert f["attention_backend"] == "fa3" and f["lora_backend"] == "csgmv"
    assert f["cuda_graph_captures"] == 12  # decode graphs for bs 1..64
    assert f["graph_capture_s"] == pytest.approx(7.55 + 2.10)
    assert f["max_queue_reqs_logged"] == 16 and f["max_running_reqs_logged"] == 48


def test_log_facts_from_older_line_shapes():
    # Line shapes of earlier 0.5.x releases, kept parseable.
    text = "\n".join(
        [
            "server_args=ServerArgs(model_path='/m', attention_backend='fa3', lora_backend='csgmv', "
            "max_loras_per_batch=2)",
            "[2026-11-20 10:00:00] KV Cache is allocated. #tokens: 1,012,345, K size: 54.1 GB, V size: 54.1 GB",
            "[2026-11-20 10:00:01] Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]",
            "[2026-11-20 10:00:09] Capture cuda graph end. Time elapsed: 7.91 s. mem usage=0.61 GB. avail mem=25.1 GB.",
            "[2026-11-20 10:01:00] Decode batch. #running-req: 32, #token: 5000, token usage: 0.01, #queue-req: 16,",
        ]
    )
    f = get_engine("sglang").parse_log(text)
    assert f["kv_cache_tokens"] == 1012345 and f["attention_backend"] == "fa3" and f["lora_backend"] == "csgmv"
    assert f["cuda_graph_captures"] == 11 and f["graph_capture_s"] == 7.91
    assert f["max_queue_reqs_logged"] == 16 and f["max_running_reqs_logged"] == 32
