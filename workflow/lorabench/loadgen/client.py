"""Streaming OpenAI-compatible client that records one row per request.

Each request is a streamed ``/v1/completions`` call. The client timestamps every server-sent event as it is
read, so TTFT (first event carrying text) and inter-token latencies come from arrival times on this side of the
socket; token counts come from the server's ``usage`` block. The hot path avoids JSON-decoding every event: it
only needs to know that an event carries a choice, and decodes the small final events (finish reason, usage)
and any error.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

_DATA = b"data: "
_DONE = b"[DONE]"
_CHOICE_MARK = b'"text":"'
_USAGE_MARK = b'"usage":{'
_ERROR_MARK = b'"error"'


@dataclass
class RequestRecord:
    """What one request did, as seen by the client. Times are seconds (perf_counter clock) unless noted."""

    request_id: str
    model: str
    adapter: str
    status: int = 0
    error: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    expected_tokens: int = 0
    ttft_s: float = float("nan")
    latency_s: float = float("nan")
    itl_s: list[float] = field(default_factory=list)
    start_s: float = 0.0
    end_s: float = 0.0
    wall_start: float = 0.0
    events: int = 0
    finish_reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CompletionRequest:
    """One request of a request set, already resolved to the model name the server expects."""

    request_id: str
    adapter: str
    model: str
    prompt: str
    max_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = True

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": self.prompt,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.ignore_eos:
            body["ignore_eos"] = True
        return body


def _usage(rec: RequestRecord, usage: dict[str, Any]) -> None:
    rec.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    rec.completion_tokens = int(usage.get("completion_tokens") or 0)


def _classify(rec: RequestRecord, ignore_eos: bool) -> None:
    """Turn a finished stream into an error when it is incomplete (cut stream, fewer tokens than asked)."""
    if rec.error:
        return
    if rec.completion_tokens == 0 and rec.events == 0:
        rec.error = "empty stream"
    elif ignore_eos and rec.completion_tokens < rec.expected_tokens:
        rec.error = f"short completion: {rec.completion_tokens} of {rec.expected_tokens} tokens"


async def send_request(
    session: aiohttp.ClientSession, base_url: str, req: CompletionRequest, timeout_s: float
) -> RequestRecord:
    """Send one streamed completion and record it. Never raises for request-level failures."""
    rec = RequestRecord(request_id=req.request_id, model=req.model, adapter=req.adapter, expected_tokens=req.max_tokens)
    perf = time.perf_counter
    rec.wall_start = time.time()
    start = perf()
    rec.start_s = start
    last = start
    first = 0.0
    itl: list[float] = []
    buf = b""
    done = False
    try:
        async with session.post(
            base_url + "/v1/completions",
            json=req.payload(),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            rec.status = resp.status
            if resp.status != 200:
                body = await resp.text()
                rec.error = f"HTTP {resp.status}: {body[:300]}"
            else:
                async for chunk in resp.content.iter_any():
                    now = perf()
                    buf += chunk
                    if b"\n\n" not in buf:
                        continue
                    *events, buf = buf.split(b"\n\n")
                    for ev in events:
                        if not ev.startswith(_DATA):
                            continue
                        data = ev[6:]
                        if data == _DONE:
                            done = True
                            continue
                        compact = _CHOICE_MARK in data or b'"choices":[' in data
                        if not compact and b'"choices"' in data:
                            # An engine that writes JSON with spaces: the slow path, decoded in full.
                            obj = json.loads(data)
                            if obj.get("usage"):
                                _usage(rec, obj["usage"])
                            if not obj.get("choices"):
                                continue
                            data = json.dumps(obj["choices"][0:1], separators=(",", ":")).encode()
                            data = b'{"choices":' + data + b"}"
                        elif _USAGE_MARK in data:
                            _usage(rec, json.loads(data).get("usage") or {})
                            if b'"choices":[]' in data:
                                continue
                        if _ERROR_MARK in data and b'"choices"' not in data:
                            rec.error = "stream error: " + data.decode(errors="replace")[:300]
                            continue
                        if _CHOICE_MARK in data or b'"choices":[{' in data:
                            rec.events += 1
                            if first == 0.0:
                                first = now
                            else:
                                itl.append(now - last)
                            last = now
                            if b'"finish_reason":"' in data:
                                fr = json.loads(data)["choices"][0].get("finish_reason") or ""
                                rec.finish_reason = fr
                if not done and not rec.error:
                    rec.error = "stream ended without [DONE]"
    except TimeoutError:
        rec.error = f"timeout after {timeout_s:g} s"
    except aiohttp.ClientError as e:
        rec.error = f"{type(e).__name__}: {e}"
    end = perf()
    rec.end_s = end
    rec.latency_s = end - start
    if first:
        rec.ttft_s = first - start
    rec.itl_s = itl
    _classify(rec, req.ignore_eos)
    return rec


def make_session(limit: int, api_key: str | None = None) -> aiohttp.ClientSession:
    """A session whose connection pool admits every request of a burst at once (and that sends the server's API
    key with each request, where it has one)."""
    connector = aiohttp.TCPConnector(limit=max(limit, 1), force_close=False, ttl_dns_cache=300)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None), headers=headers)


async def run_burst(
    session: aiohttp.ClientSession, base_url: str, requests: list[CompletionRequest], timeout_s: float
) -> list[RequestRecord]:
    """Send every request at once and wait for all of them (the source study's burst method)."""
    return list(await asyncio.gather(*(send_request(session, base_url, r, timeout_s) for r in requests)))


async def run_concurrency(
    session: aiohttp.ClientSession,
    base_url: str,
    requests: list[CompletionRequest],
    concurrency: int,
    timeout_s: float,
    duration_s: float | None = None,
    rate_per_s: float | None = None,
) -> list[RequestRecord]:
    """Keep at most ``concurrency`` requests in flight, optionally paced at ``rate_per_s`` and cut at a duration.

    Requests are taken in order from ``requests`` (cycled when a duration is set), so the request set file
    still decides which adapter each request uses.
    """
    sem = asyncio.Semaphore(concurrency)
    records: list[RequestRecord] = []
    t0 = time.perf_counter()

    async def one(r: CompletionRequest) -> None:
        try:
            records.append(await send_request(session, base_url, r, timeout_s))
        finally:
            sem.release()

    tasks: list[asyncio.Task[None]] = []
    i = 0
    while True:
        if duration_s is None and i >= len(requests):
            break
        if duration_s is not None and time.perf_counter() - t0 >= duration_s:
            break
        if rate_per_s:
            due = t0 + i / rate_per_s
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        await sem.acquire()
        base = requests[i % len(requests)]
        req = (
            base if i < len(requests) else CompletionRequest(**{**asdict(base), "request_id": f"{base.request_id}~{i}"})
        )
        tasks.append(asyncio.create_task(one(req)))
        i += 1
    await asyncio.gather(*tasks)
    return records
