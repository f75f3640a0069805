"""Checks on a ready server, apart from measuring: the operational probes a user relies on (served names listed,
a wrong model name refused, a request without the server's key refused) and the canary (each adapter changes the
base model's greedy output; an adapter served without effect stops the job before anything is measured)."""

from __future__ import annotations

from typing import Any

import aiohttp

from ..engines import Engine, ServerSpec
from ..engines.base import models_listed_ok
from ..loadgen.client import CompletionRequest


async def served_models(session: aiohttp.ClientSession, base_url: str) -> list[str]:
    """The model names the server lists (``/v1/models``), sorted."""
    async with session.get(base_url + "/v1/models") as r:
        return sorted(m["id"] for m in (await r.json(content_type=None)).get("data", []))


async def probe_server(
    session: aiohttp.ClientSession, base_url: str, engine: Engine, spec: ServerSpec
) -> dict[str, Any]:
    """Operational checks a user relies on: served names are listed; a wrong model name is refused."""
    out: dict[str, Any] = {}
    out["models_listed"] = await served_models(session, base_url)
    expected = sorted({spec.served_name, *(engine.request_model(spec, a) for a in spec.adapters)})
    out["models_expected"] = expected  # the names requests use
    out["models_listed_ok"] = models_listed_ok(out, list(spec.adapters))
    bad = CompletionRequest(
        "probe/wrong-model", "no-such-adapter", engine.request_model(spec, "no-such-adapter-x"), "hello", 4
    )
    payload = bad.payload()
    payload["stream"] = False
    payload.pop("stream_options", None)
    async with session.post(base_url + "/v1/completions", json=payload) as r:
        out["wrong_model_status"] = r.status
        out["wrong_model_body"] = (await r.text())[:300]
    out["wrong_model_rejected"] = out["wrong_model_status"] >= 400
    if session.headers.get("Authorization"):
        async with aiohttp.ClientSession() as anon:  # the same request without the server's key
            good = CompletionRequest("probe/no-key", "base", engine.request_model(spec, "base"), "hello", 4).payload()
            good["stream"] = False
            good.pop("stream_options", None)
            async with anon.post(base_url + "/v1/completions", json=good) as r:
                out["no_key_status"] = r.status
        out["no_key_refused"] = out["no_key_status"] in (401, 403)
    return out


CANARY_PROMPT = "The quick brown fox"


class AdapterIgnored(RuntimeError):
    """An adapter's output equals the base model's: the engine serves the name without applying the weights."""


async def _greedy(session: aiohttp.ClientSession, base_url: str, model: str, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": CANARY_PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "logprobs": 1,
        "ignore_eos": True,
    }
    async with session.post(base_url + "/v1/completions", json=body) as r:
        data = await r.json(content_type=None)
        if r.status != 200:
            raise AdapterIgnored(f"canary request for {model!r} failed: HTTP {r.status}: {str(data)[:300]}")
    choice = data["choices"][0]
    lps = (choice.get("logprobs") or {}).get("token_logprobs") or []
    return {"text": choice.get("text", ""), "logprobs": [float(x) for x in lps if x is not None]}


async def canary(
    session: aiohttp.ClientSession,
    base_url: str,
    engine: Engine,
    spec: ServerSpec,
    adapters: list[str],
    max_tokens: int = 8,
    min_logprob_diff: float = 1e-3,
) -> dict[str, Any]:
    """Before anything is measured: each adapter's greedy output for a fixed prompt must differ from the base
    model's, in text or in the log-probabilities of its tokens (the adapters' random lora_B makes them differ).
    An adapter the engine ignores raises ``AdapterIgnored`` naming it."""
    base = await _greedy(session, base_url, engine.request_model(spec, "base"), max_tokens)
    out: dict[str, Any] = {"prompt": CANARY_PROMPT, "base_text": base["text"], "adapters": {}}
    ignored = []
    for a in adapters:
        got = await _greedy(session, base_url, engine.request_model(spec, a), max_tokens)
        pairs = list(zip(got["logprobs"], base["logprobs"], strict=False))
        diff = max((abs(x - y) for x, y in pairs), default=0.0)
        differs = got["text"] != base["text"] or diff > min_logprob_diff
        out["adapters"][a] = {"text": got["text"], "max_logprob_diff": diff, "differs": differs}
        if not differs:
            ignored.append(a)
    if ignored:
        raise AdapterIgnored(
            f"{spec.server_id}: adapter(s) {', '.join(ignored)} give exactly the base model's output and "
            f"log-probabilities for {CANARY_PROMPT!r}: the engine serves them without applying them (an adapter "
            "whose target modules the engine does not support, or a load that silently failed); nothing measured"
        )
    return out
