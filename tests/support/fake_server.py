"""A fake OpenAI-style streaming server for what a real engine cannot do on demand: inject faults (HTTP errors,
cut streams, short completions, stalls), stream tokens as fast as possible (benchmarks/headroom.py measures the
client against it), and serve a fixed number of requests at a time (``slots``: a request waits for a free slot,
then streams its tokens ``delay`` seconds apart), so that open-loop load queues and latency grows as the offered
rate nears ``slots / (max_tokens x delay)`` requests per second, and without bound beyond it. Test support only,
outside the product package: never used for measurements of engines.

Imported as ``tests.support.fake_server`` (the repository root on sys.path), or run as a script:
``python tests/support/fake_server.py --port N``."""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import socket
import time
import urllib.request
from typing import Any

from aiohttp import web


def _render(i: int, finish: str | None = None) -> bytes:
    body = {
        "id": "cmpl-x",
        "object": "text_completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "text": f" t{i}", "logprobs": None, "finish_reason": finish, "stop_reason": None}],
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


# Events are rendered once: the server must cost far less per token than the client it is there to load.
_TOKEN_EVENT = _render(0)
_LAST_EVENT = _render(0, "length")


def _event(i: int, finish: str | None = None) -> bytes:
    return _LAST_EVENT if finish else _TOKEN_EVENT


def _spaced(event: bytes) -> bytes:
    """The same event re-encoded with json's default separators (", " and ": ")."""
    body = json.loads(event[len(b"data: ") :].strip())
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _usage(prompt: int, completion: int) -> bytes:
    body = {
        "id": "cmpl-x",
        "object": "text_completion",
        "created": 0,
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion},
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n"


async def completions(request: web.Request) -> web.StreamResponse:
    cold_s = float(request.app["cold_s"])
    if cold_s > 0:  # a cold server: every request of its first cold_s seconds waits until they have passed
        t0 = request.app.setdefault("first_request", time.monotonic())
        await asyncio.sleep(max(0.0, t0 + cold_s - time.monotonic()))
    slots: asyncio.Semaphore | None = request.app["slots"]
    if slots is None:
        return await _completions(request)
    try:
        async with slots:  # queued until one of the server's slots is free
            return await _completions(request)
    except ConnectionResetError:  # the client gave up (an open-loop run cuts what is in flight at its end)
        return web.Response(status=499)


async def _completions(request: web.Request) -> web.StreamResponse:
    body: dict[str, Any] = await request.json()
    model = body.get("model", "")
    n = int(body.get("max_tokens", 16))
    fault = request.app["fault"] if model == "fault" or request.app["fault_all"] else ""
    if model == "missing":
        return web.json_response({"error": {"message": "model does not exist", "code": 404}}, status=404)
    if fault == "http500":
        return web.json_response({"error": {"message": "boom"}}, status=500)
    if not body.get("stream"):
        # The same text and log-probabilities for every model name: an engine that serves an adapter without
        # applying it (what the canary must catch).
        tokens = [f" t{i % 3}" for i in range(n)]
        choice = {
            "index": 0,
            "text": "".join(tokens),
            "finish_reason": "length",
            "logprobs": {"tokens": tokens, "token_logprobs": [-0.5] * n},
        }
        if request.app["delay"]:  # as long as the same tokens streamed would take
            await asyncio.sleep(request.app["delay"] * n / int(request.app["batch"]))
        usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
        return web.json_response(
            {"id": "cmpl-x", "object": "text_completion", "model": model, "choices": [choice], "usage": usage}
        )
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    batch = int(request.app["batch"])
    if fault == "cut":
        await resp.write(_event(0) + _event(1))
        request.transport.close()  # type: ignore[union-attr]
        return resp
    produced = n if fault != "short" else max(n // 2, 1)
    if fault == "stall":
        await resp.write(_event(0))
        await asyncio.sleep(3600)
    chunk = bytearray()
    if fault == "spaced":  # JSON written with spaces after separators, as some servers do
        for i in range(produced):
            chunk += _spaced(_event(i, "length" if i == produced - 1 else None))
        await resp.write(bytes(chunk) + _spaced(_usage(5, produced).split(b"\n\n")[0] + b"\n\n") + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
    for i in range(produced):
        chunk += _event(i, "length" if i == produced - 1 else None)
        if len(chunk) and (i + 1) % batch == 0:
            await resp.write(bytes(chunk))
            chunk.clear()
            if request.app["delay"]:
                await asyncio.sleep(request.app["delay"])
    chunk += _usage(5, produced)
    await resp.write(bytes(chunk))
    await resp.write_eof()
    return resp


async def models(_request: web.Request) -> web.Response:
    return web.json_response({"data": [{"id": "m"}]})


def make_app(
    fault: str = "", fault_all: bool = False, batch: int = 1, delay: float = 0.0, slots: int = 0, cold_s: float = 0.0
) -> web.Application:
    """``slots`` > 0: at most that many requests are served at once, the others wait in arrival order. ``cold_s``
    > 0: the requests of the first ``cold_s`` seconds from the first one are held until then (an engine compiling
    kernels on its first batches)."""
    app = web.Application()
    app["fault"], app["fault_all"], app["batch"], app["delay"] = fault, fault_all, batch, delay
    app["cold_s"] = cold_s
    app["slots"] = asyncio.Semaphore(slots) if slots > 0 else None
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    return app


def _serve(sock: socket.socket, kwargs: dict[str, Any]) -> None:
    web.run_app(make_app(**kwargs), sock=sock, print=None, access_log=None)


def start_in_process(**kwargs: Any) -> tuple[Any, int]:
    """Start the server in a child process (own core) on a free loopback port and wait until it answers;
    returns (process, port)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    proc = mp.get_context("fork").Process(target=_serve, args=(sock, kwargs), daemon=True)
    proc.start()
    sock.close()
    deadline = time.monotonic() + 60  # up in a moment; a busy host may take seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    return proc, port


def main() -> None:
    """``python tests/support/fake_server.py --port N``: the fault-injection server as a process of its own (what
    a toy engine module starts in the plug-in test)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay", type=float, default=0.002, help="seconds between streamed tokens")
    ap.add_argument("--slots", type=int, default=0, help="requests served at once (0: no limit)")
    args = ap.parse_args()
    web.run_app(
        make_app(delay=args.delay, slots=args.slots), host=args.host, port=args.port, print=None, access_log=None
    )


if __name__ == "__main__":
    main()
