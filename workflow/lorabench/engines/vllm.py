"""vLLM (CUDA and CPU builds): OpenAI server flags, adapter naming, runtime LoRA API and log facts.

Flags follow vLLM's own CLI (``vllm/engine/arg_utils.py``): ``--enable-lora``, ``--lora-modules name=path``,
``--max-loras`` (distinct adapters in one batch), ``--max-cpu-loras`` (adapter cache on the host, at least
``--max-loras``), ``--max-lora-rank``. A request selects an adapter by putting its name in ``model``.
Runtime loading needs ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and uses ``/v1/load_lora_adapter``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..harness import cpu_list
from .base import Engine, ServerSpec, first_match, flags_from_args, launch_argv, lora_argv, register


@register
class VLLM(Engine):
    name = "vllm"
    ready_path = "/v1/models"
    server_markers = ("vllm.entrypoints.openai.api_server", "VLLM::EngineCor", "VLLM::Worker")
    has_cpu_adapter_cache = True
    default_max_loras = 1  # --max-loras
    default_max_lora_rank = 16  # --max-lora-rank (vllm/config/lora.py: max_lora_rank: MaxLoRARanks = 16)
    cached_tokens_args = {"enable_prompt_tokens_details": True}
    context_arg = "max_model_len"
    metric_prefixes = (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:lora_requests_info",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions",
    )

    metric_names = {
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:num_requests_waiting_by_reason_deferred": "deferred",
        "vllm:kv_cache_usage_perc": "kv_cache_usage",
        "vllm:num_preemptions": "preemptions",
    }

    def lora_sets(self, sample: dict[str, Any]) -> tuple[str, str] | None:
        if sample["name"] != "vllm:lora_requests_info":
            return None
        return sample["labels"].get("running_lora_adapters", ""), sample["labels"].get("waiting_lora_adapters", "")

    def command(self, spec: ServerSpec, host: str, port: int) -> list[str]:
        argv = launch_argv(spec, "vllm.entrypoints.openai.api_server", "--model", host, port)
        lora = {"max_loras": "--max-loras", "max_cpu_loras": "--max-cpu-loras", "max_lora_rank": "--max-lora-rank"}
        return argv + lora_argv(spec, lora, "--lora-modules") + flags_from_args(spec.args)

    def environment(self, spec: ServerSpec) -> dict[str, str]:
        env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        if spec.runtime_lora:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        return env

    def compile_cache_env(self, cache: str) -> dict[str, str]:
        # vLLM keys its torch.compile artifacts by a hash of the model, its config and the compiler (torch_compile
        # _cache/HASH below VLLM_CACHE_ROOT): servers of one study share the artifacts of equal configurations.
        if cache == "off":
            return {"VLLM_DISABLE_COMPILE_CACHE": "1"}
        return {"VLLM_CACHE_ROOT": str(Path(cache).resolve())} if cache else {}

    def api_key_env(self, key: str) -> dict[str, str]:
        return {"VLLM_API_KEY": key}  # read by vLLM's API server when --api-key is not given

    def cpu_threads_env(self, cpus: tuple[int, ...]) -> dict[str, str]:
        # vLLM's CPU worker binds one OpenMP thread to each listed CPU (its own default spreads them over all).
        return {"VLLM_CPU_OMP_THREADS_BIND": cpu_list(cpus)}

    def request_model(self, spec: ServerSpec, adapter: str | None) -> str:
        return spec.served_name if adapter in (None, "base") else adapter

    def load_adapter_request(self, name: str, path: str) -> tuple[str, dict[str, Any]]:
        return "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}

    def unload_adapter_request(self, name: str) -> tuple[str, dict[str, Any]]:
        return "/v1/unload_lora_adapter", {"lora_name": name}

    def version_code(self) -> str:
        return "import vllm; print(vllm.__version__)"

    def check(self, spec: ServerSpec) -> None:
        super().check(spec)
        if spec.lora and spec.max_cpu_loras is not None and spec.max_loras is not None:
            if spec.max_cpu_loras < spec.max_loras:
                raise ValueError(
                    f"servers.{spec.server_id}: max_cpu_loras ({spec.max_cpu_loras}) must be at least "
                    f"max_loras ({spec.max_loras})"
                )

    def parse_log(self, text: str) -> dict[str, Any]:
        facts: dict[str, Any] = {
            "engine_version": first_match(r"\(v(\d+\.\d+\.\d+[^)]*)\) with config", text),
            "kv_cache_tokens": first_match(r"(?:GPU|CPU|XPU) KV cache size: ([\d,]+) tokens", text, int),
            "max_concurrency_x": first_match(
                r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x", text, float
            ),
            "attention_backend": first_match(r"Using (\S+) attention backend", text)
            or first_match(r"Using (\S+) backend\.", text),
            "engine_init_s": first_match(
                r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+)", text, float
            ),
            "torch_compile_s": first_match(r"torch\.compile (?:takes|took) ([\d.]+) s in total", text, float),
            "model_load_gib": first_match(r"Model loading took ([\d.]+) GiB", text, float),
            "graph_capture_s": first_match(r"Graph capturing finished in ([\d.]+) secs", text, float),
            "graph_capture_gib": first_match(
                r"Graph capturing finished in [\d.]+ secs, took ([\d.]+) GiB", text, float
            ),
            "device": first_match(r"device_config=(\w+)", text),
        }
        # torch.compile: artifacts loaded from the cache ("Directly load the compiled graph(s) ... took X s"), or
        # compiled and stored ("Compiling a graph for compile range ... takes X s" after "Cache the graph ...").
        loads = [float(x) for x in re.findall(r"Directly load the compiled graph\(s\)[^\n]*? took ([\d.]+) s", text)]
        compiles = [float(x) for x in re.findall(r"Compiling a graph for [^\n]*? takes ([\d.]+) s", text)]
        facts["compile_cache"] = "hit" if loads and not compiles else "miss" if compiles else None
        facts["compile_cache_load_s"] = sum(loads) if loads else None
        facts["compile_s"] = sum(compiles) if compiles else None
        facts["compile_cache_dir"] = first_match(r"Using cache directory: (\S+) for vLLM's torch\.compile", text)
        # Each "Capturing CUDA graphs (mode, kind)" progress bar ends at N/N: the captures are the sum of the N.
        bars: dict[str, int] = {}
        for m in re.finditer(r"Capturing CUDA graphs \(([^)]*)\)[^\n\r]*?(\d+)/(\d+)", text):
            bars[m.group(1)] = int(m.group(3))
        facts["cuda_graph_captures"] = sum(bars.values()) if bars else None
        facts["cuda_graph_bars"] = bars or None
        deferred = [int(x) for x in re.findall(r"Deferred: (\d+) reqs", text)]
        facts["max_deferred_reqs_logged"] = max(deferred) if deferred else None
        return facts
