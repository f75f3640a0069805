"""Load shapes of a measurement: one burst, or bounded concurrency with a rate (fault-free local server)."""

from __future__ import annotations

import asyncio

import pytest

from lorabench.engines import ServerSettings
from lorabench.job import ServerJob
from lorabench.loadgen.client import CompletionRequest, make_session
from lorabench.measure.measurer import send

from .support.fake_server import start_in_process

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def url():
    proc, port = start_in_process(delay=0.002)
    yield f"http://127.0.0.1:{port}"
    proc.kill()


def job(**load) -> ServerJob:
    return ServerJob(server=ServerSettings(server_id="t", engine="vllm", served_name="m"), load=load)


def reqs(n: int) -> list[CompletionRequest]:
    return [CompletionRequest(f"r{i}", "a", "m", "x", 8) for i in range(n)]


async def _send(url: str, n: int, j: ServerJob):
    async with make_session(n) as s:
        return await send(s, url, reqs(n), j)


def test_burst_shape_sends_everything_at_once(url):
    async def go():  # requests of a second each (500 tokens 2 ms apart): all sent before any ends, on a busy host too
        async with make_session(8) as s:
            return await send(s, url, [CompletionRequest(f"r{i}", "a", "m", "x", 500) for i in range(8)],
                              job(shape="burst"))  # fmt: skip

    recs = asyncio.run(go())
    assert len(recs) == 8 and all(r.ok for r in recs)
    assert max(r.start_s for r in recs) < min(r.end_s for r in recs)


def test_concurrency_shape_bounds_in_flight(url):
    recs = asyncio.run(_send(url, 8, job(shape="concurrency", concurrency=2)))
    assert len(recs) == 8 and all(r.ok for r in recs)
    events = sorted([(r.start_s, 1) for r in recs] + [(r.end_s, -1) for r in recs])
    in_flight = peak = 0
    for _, d in events:
        in_flight += d
        peak = max(peak, in_flight)
    assert peak <= 2


def test_rate_paces_request_starts(url):
    recs = asyncio.run(_send(url, 6, job(shape="concurrency", concurrency=6, rate_per_s=20)))
    starts = sorted(r.start_s for r in recs)
    assert starts[-1] - starts[0] >= 5 / 20 * 0.9
