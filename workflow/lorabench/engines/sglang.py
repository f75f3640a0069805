"""SGLang: server flags, adapter naming, runtime LoRA API and log facts.

Flags follow SGLang's ``ServerArgs`` (``sglang/srt/server_args.py``): ``--model-path``, ``--enable-lora``,
``--lora-paths name=path``, ``--max-loras-per-batch`` (distinct adapters in one batch), ``--max-lora-rank``,
``--lora-target-modules``. Its OpenAI endpoint selects an adapter with ``"model": "BASE:ADAPTER"`` (split on the
first colon). Runtime loading uses ``/load_lora_adapter``. SGLang needs a GPU.
"""

from __future__ import annotations

import re
from typing import Any

from .base import Engine, ServerSpec, first_match, flags_from_args, launch_argv, lora_argv, register


@register
class SGLang(Engine):
    name = "sglang"
    default_max_loras = 8  # --max-loras-per-batch
    # --max-lora-rank left unset: "automatically inferred from the adapters provided in --lora-paths" (ServerArgs)
    default_max_lora_rank = None
    base_takes_slot = True  # a base-model request in a LoRA batch: h200-8b's a/b/base on 2 slots ran in 2 rounds
    # --lora-target-modules left unset: "inferred from the adapters provided in --lora-paths" as their union
    # (ServerArgs; SGLang's LoRA documentation). rank-sweep-h100: q/k/v/o and all-linear adapters cost the same there.
    lora_layers_union = True
    ready_path = "/v1/models"
    server_markers = ("sglang.launch_server",)
    # the scheduler process's event loop polls for requests unless started with --sleep-on-idle (server_args
    # sleep_on_idle, False by default): its main thread shows one full CPU at any load
    polling_threads = ("sglang::schedul",)
    context_arg = "context_length"
    metric_prefixes = (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:lora",
    )

    metric_names = {"sglang:num_running_reqs": "running", "sglang:num_queue_reqs": "waiting"}
    cached_tokens_args = {"enable_cache_report": True}

    def command(self, spec: ServerSpec, host: str, port: int) -> list[str]:
        argv = [*launch_argv(spec, "sglang.launch_server", "--model-path", host, port), "--enable-metrics"]
        lora = {"max_loras": "--max-loras-per-batch", "max_lora_rank": "--max-lora-rank"}
        return argv + lora_argv(spec, lora, "--lora-paths") + flags_from_args(spec.args)

    def environment(self, spec: ServerSpec) -> dict[str, str]:
        return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}

    def api_key_args(self, key: str) -> list[str]:
        # SGLang takes the key on its command line only (readable through /proc by other users of the node).
        return ["--api-key", key]

    def request_model(self, spec: ServerSpec, adapter: str | None) -> str:
        return spec.served_name if adapter in (None, "base") else f"{spec.served_name}:{adapter}"

    def load_adapter_request(self, name: str, path: str) -> tuple[str, dict[str, Any]]:
        return "/load_lora_adapter", {"lora_name": name, "lora_path": path}

    def unload_adapter_request(self, name: str) -> tuple[str, dict[str, Any]]:
        return "/unload_lora_adapter", {"lora_name": name}

    def version_code(self) -> str:
        return "import sglang; print(sglang.__version__)"

    def check(self, spec: ServerSpec) -> None:
        super().check(spec)
        if spec.max_cpu_loras is not None:
            raise ValueError(f"servers.{spec.server_id}: max_cpu_loras is a vLLM setting; SGLang has none")
        if spec.lora and ":" in spec.served_name:
            raise ValueError(f"servers.{spec.server_id}: served name may not contain ':' (SGLang adapter syntax)")

    def parse_log(self, text: str) -> dict[str, Any]:
        # 0.5.17 on an H200 (tests/engines/sglang_h200_log_lines.txt): "KV Cache is allocated. dtype: ...,
        # #tokens: N", "Capture target decode CUDA graph begin. ... bs=[1, 2, ...]", "... end. elapsed=2.10 s";
        # older 0.5 releases wrote "#tokens:" right after "allocated." and "Capture cuda graph bs [...]".
        bs_list = re.search(r"Capture (?:target decode CUDA graph begin\..*?bs=|cuda graph bs )\[([\d, ]+)\]", text)
        capture = [float(x) for x in re.findall(r"Capture target \w+ CUDA graph end\. elapsed=([\d.]+) s", text)]
        queue = [int(x) for x in re.findall(r"#queue-req: (\d+)", text)]
        running = [int(x) for x in re.findall(r"#running-req: (\d+)", text)]
        return {
            "engine_version": first_match(r"sglang[ =](\d+\.\d+\.\d+\S*)", text),
            "kv_cache_tokens": first_match(r"KV Cache is allocated\.[^\n]*?#tokens: ([\d,]+)", text, int),
            "attention_backend": first_match(r"attention_backend='([^']+)'", text),
            "lora_backend": first_match(r"lora_backend='([^']+)'", text),
            "cuda_graph_captures": len(bs_list.group(1).split(",")) if bs_list else None,
            "graph_capture_s": (sum(capture) if capture else None)
            or first_match(r"Capture cuda graph end\. Time elapsed: ([\d.]+) s", text, float),
            "max_queue_reqs_logged": max(queue) if queue else None,
            "max_running_reqs_logged": max(running) if running else None,
        }
