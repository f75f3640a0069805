"""The /metrics poller: parsing, stopping it never swallows the caller's own cancellation, and the load test's client
leaves it a connection while a burst holds all the others."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import aiohttp
from aiohttp import web

from lorabench.loadgen.client import make_session
from lorabench.measure.measurer import client_connections
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


def _polled(connections: int, interval_s: float, request_s: float, requests: int = 4) -> list[float]:
    """When a sampler polled (seconds after its start) while ``requests`` requests of ``request_s`` each were in
    flight, on a client of ``connections``. A server here stands in for any engine: its /metrics answers at once."""

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(request_s)
        return web.json_response({})

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text="vllm:num_requests_running 4\n")

    async def main() -> list[float]:
        app = web.Application()
        app.router.add_post("/v1/completions", slow)
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}"
        try:
            async with make_session(connections) as http:

                async def one() -> None:
                    async with http.post(url + "/v1/completions", json={}) as r:
                        await r.read()

                sampler = MetricsSampler(http, url + "/metrics", ("vllm:",), interval_s)
                t0 = time.time()
                sampler.start()
                await asyncio.gather(*(one() for _ in range(requests)))
                return [s["t"] - t0 for s in await sampler.stop()]
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def test_the_load_tests_client_polls_metrics_while_its_largest_burst_is_in_flight():
    """Loan 13: the client's pool was exactly as large as the largest burst, so a poll taken while a burst was in
    flight waited for its first request to finish; a one-round burst of 48 got two polls, at 0.00 and 0.07 s."""
    job = SimpleNamespace(bursts=[2, 4])
    # requests of 2 s polled every 0.05 s: dozens of polls in flight on a quiet host, and a few still on a busy one
    # (its event loop held up for tenths of a second at a time)
    polled = _polled(client_connections(job), 0.05, 2.0)  # type: ignore[arg-type]
    in_flight = [t for t in polled if 0.1 < t < 1.9]
    assert len(in_flight) >= 3, polled
    # a pool as large as the burst alone: the polls wait for the burst
    held = _polled(4, 0.05, 2.0)
    assert not [t for t in held if 0.1 < t < 1.9], held


def test_a_burst_shorter_than_the_interval_is_still_polled_in_flight():
    """A fresh clone at a fast hour: slot-queues-cpu's bursts took 0.24 s against polls every 0.25 s, and the one
    poll of each burst came at its start, before any request ran (5 of its 6 cells with none in flight). The first
    poll now comes half an interval in (here 0.5 s into requests of 0.9 s, polled every second: the margins leave a
    busy host's event loop some tenths of a second)."""
    polled = _polled(5, 1.0, 0.9)
    assert polled and all(t >= 0.45 for t in polled), polled
    assert [t for t in polled if t < 0.9], polled  # one while the requests run
