"""The /metrics poller: parsing, and stopping it never swallows the caller's own cancellation."""

from __future__ import annotations

import asyncio

import aiohttp

from lorabench.metrics import MetricsSampler, parse_prometheus


def test_parse_keeps_only_prefixed_series_with_labels():
    text = (
        "# HELP vllm:num_requests_running x\n"
        'vllm:num_requests_running{model_name="m"} 3.0\n'
        "process_cpu_seconds_total 12\n"
        'vllm:lora_requests_info{running_lora_adapters="a,b",waiting_lora_adapters=""} 1.7e9\n'
    )
    rows = parse_prometheus(text, ("vllm:",))
    assert [r["name"] for r in rows] == ["vllm:num_requests_running", "vllm:lora_requests_info"]
    assert rows[0]["labels"] == {"model_name": "m"} and rows[0]["value"] == 3.0
    assert rows[1]["labels"]["running_lora_adapters"] == "a,b"


def test_cancelling_the_caller_during_stop_is_not_swallowed():
    """Ctrl-C makes asyncio.run cancel the main task; if that lands while the task waits in stop(), the
    cancellation must reach the task (it used to be caught there, and an interrupted run went on measuring)."""

    async def main() -> tuple[bool, list]:
        async with aiohttp.ClientSession() as session:
            # nothing listens on the discard port: every poll fails fast and the poller sleeps
            sampler = MetricsSampler(session, "http://127.0.0.1:9/metrics", ("vllm:",), 0.05)
            sampler.start()
            await asyncio.sleep(0.1)
            caller = asyncio.create_task(sampler.stop())
            await asyncio.sleep(0)  # the caller now waits for the poller to finish
            caller.cancel()
            try:
                await caller
            except asyncio.CancelledError:
                pass
            plain = await MetricsSampler(session, "http://127.0.0.1:9/metrics", ("vllm:",), 0.05).stop()
            return caller.cancelled(), plain

    cancelled, plain = asyncio.run(main())
    assert cancelled
    assert plain == []
