"""The streaming client's error accounting, against injected faults a real engine cannot produce on demand."""

from __future__ import annotations

import asyncio

import pytest

from lorabench.loadgen.client import CompletionRequest, make_session, run_burst, run_concurrency, send_request

from ..support.fake_server import start_in_process

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def servers():
    procs = {}
    for name, kw in {
        "ok": {},
        "slow": {"delay": 0.01},  # a token every 10 ms
        "http500": {"fault": "http500", "fault_all": True},
        "cut": {"fault": "cut", "fault_all": True},
        "short": {"fault": "short", "fault_all": True},
        "stall": {"fault": "stall", "fault_all": True},
        "spaced": {"fault": "spaced", "fault_all": True},
    }.items():
        procs[name] = start_in_process(**kw)
    yield {k: f"http://127.0.0.1:{p}" for k, (_, p) in procs.items()}
    for proc, _ in procs.values():
        proc.kill()


def req(n: int = 8, model: str = "m") -> CompletionRequest:
    return CompletionRequest("r0", "a", model, "hello", n)


async def one(url: str, r: CompletionRequest, timeout: float = 10):
    async with make_session(4) as s:
        return await send_request(s, url, r, timeout)


def test_complete_stream_counts_tokens_and_latencies(servers):
    rec = asyncio.run(one(servers["ok"], req(8)))
    assert rec.ok, rec.error
    assert rec.status == 200
    assert rec.completion_tokens == 8 and rec.prompt_tokens == 5
    assert rec.events == 8
    assert len(rec.itl_s) == 7
    assert 0 < rec.ttft_s <= rec.latency_s
    assert rec.finish_reason == "length"


def test_json_with_spaces_is_read_the_same(servers):
    compact = asyncio.run(one(servers["ok"], req(8)))
    spaced = asyncio.run(one(servers["spaced"], req(8)))
    assert spaced.ok, spaced.error
    assert (spaced.events, spaced.completion_tokens, spaced.prompt_tokens) == (8, 8, 5)
    assert (compact.events, compact.completion_tokens) == (8, 8) and len(spaced.itl_s) == 7
    assert spaced.finish_reason == "length"


def test_http_error_is_recorded(servers):
    rec = asyncio.run(one(servers["http500"], req()))
    assert not rec.ok and rec.status == 500 and "HTTP 500" in rec.error


def test_wrong_model_404(servers):
    rec = asyncio.run(one(servers["ok"], req(model="missing")))
    assert rec.status == 404 and not rec.ok


def test_cut_stream_is_an_error(servers):
    rec = asyncio.run(one(servers["cut"], req()))
    assert not rec.ok
    assert rec.completion_tokens == 0


def test_short_completion_with_ignore_eos_is_an_error(servers):
    rec = asyncio.run(one(servers["short"], req(8)))
    assert not rec.ok and "short completion: 4 of 8" in rec.error


def test_stalled_stream_times_out(servers):
    rec = asyncio.run(one(servers["stall"], req(8), timeout=1.0))
    assert not rec.ok and "timeout" in rec.error
    assert rec.latency_s < 60  # the stream stalls for an hour: the timeout, not its end, stopped it


def test_burst_sends_all_at_once(servers):
    async def go():  # requests of a second each: every one sent before any answer ends, on a busy host too
        async with make_session(16) as s:
            return await run_burst(
                s, servers["slow"], [CompletionRequest(f"r{i}", "a", "m", "x", 100) for i in range(16)], 30
            )

    recs = asyncio.run(go())
    assert len(recs) == 16 and all(r.ok for r in recs)
    assert max(r.start_s for r in recs) < min(r.end_s for r in recs)


def test_concurrency_shape_bounds_in_flight_and_cycles_requests(servers):
    async def go():
        async with make_session(4) as s:
            return await run_concurrency(s, servers["ok"], [req(4)], concurrency=2, timeout_s=10, duration_s=0.5)

    recs = asyncio.run(go())
    assert len(recs) > 2 and all(r.ok for r in recs)
    assert len({r.request_id for r in recs}) == len(recs)
