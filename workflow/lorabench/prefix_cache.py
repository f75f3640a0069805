"""Prefix caching across adapters: is a long prompt prefix, cached while one model (the base model or an adapter)
served it, reused when another model gets the same prefix?

For every ordered pair of models (first, second), with a prefix of its own that no request has sent before: one
request of the first model, then one of the second, each the prefix and a short question of its own, one token
long. The engine reports how many prompt tokens came from its cache (``usage.prompt_tokens_details``; the server
is started with the engine's flag for it); the request's latency is its prefill. Repeated with fresh prefixes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import aiohttp

from .engines import Engine
from .job import JobInputs, PrefixCache, ServerJob
from .jobs import JobKind, Json, kind_settings
from .session import ServerSession

log = logging.getLogger(__name__)

# Plain words only, so that the prefix is many tokens of any tokenizer and no two prefixes share a long run.
WORDS = (
    "river stone lantern orbit meadow copper violet harbor signal quiet amber forest engine window paper salt "
    "thunder glass ladder garden silver canyon echo pencil marble tiger velvet rocket puzzle island candle frost "
    "ember willow comet anchor basket cedar dragon falcon galaxy hollow ivory jungle kettle lemon mirror nectar "
    "oyster pepper quartz raven saddle tunnel umbrella valley walnut yonder zephyr bridge cloud desert feather"
).split()
SHARED = 0.5  # a second request reuses the first one's cache when at least this share of its prompt was cached


def pairs(adapters: list[str]) -> list[tuple[str, str]]:
    """The ordered pairs tried: the same model twice (does the engine cache at all?), an adapter after another,
    an adapter after the base model and the base model after an adapter."""
    x = adapters[0]
    out = [("base", "base"), (x, x)]
    if len(adapters) > 1:
        out.append((x, adapters[1]))
    return out + [("base", x), (x, "base")]


def prefix_text(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


async def ask(
    session: aiohttp.ClientSession, base_url: str, model: str, prompt: str, timeout_s: float
) -> dict[str, Any]:
    """One 1-token completion: its status, latency, prompt tokens and the prompt tokens served from cache."""
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0}
    t0 = time.perf_counter()
    async with session.post(
        base_url + "/v1/completions", json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)
    ) as r:
        data = await r.json(content_type=None)
    usage = data.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return {
        "status": r.status,
        "latency_ms": 1000 * (time.perf_counter() - t0),
        "prompt_tokens": usage.get("prompt_tokens"),
        # None where the engine does not report it; 0 where it reports no cached token (SGLang leaves it out)
        "cached_tokens": details.get("cached_tokens", 0) if "prompt_tokens_details" in usage else None,
        "error": None if r.status == 200 else str(data)[:200],
    }


def _share(row: dict[str, Any]) -> float | None:
    if row["cached_tokens"] is None or not row["prompt_tokens"]:
        return None
    return row["cached_tokens"] / row["prompt_tokens"]


def prefix_result(rows: list[dict[str, Any]], pc: PrefixCache) -> dict[str, Any]:
    """Per ordered pair: the median share of the second request's prompt served from cache (and the first's,
    which should be nothing), and the second's latency against the first's; the answers they give."""
    out_pairs = []
    for first, second in dict.fromkeys((r["first"], r["second"]) for r in rows):
        sel = [r for r in rows if (r["first"], r["second"]) == (first, second)]
        a = [r for r in sel if r["order"] == 0 and r["status"] == 200]
        b = [r for r in sel if r["order"] == 1 and r["status"] == 200]
        sa = [x for x in map(_share, a) if x is not None]
        sb = [x for x in map(_share, b) if x is not None]
        lat = [rb["latency_ms"] / ra["latency_ms"] for ra in a for rb in b if rb["repeat"] == ra["repeat"]]
        out_pairs.append(
            {
                "first": first,
                "second": second,
                "repeats": len(b),
                "first_cached_share": statistics.median(sa) if sa else None,
                "second_cached_share": statistics.median(sb) if sb else None,
                "second_cached_min": min(sb) if sb else None,
                "second_cached_max": max(sb) if sb else None,
                "reused": all(x >= SHARED for x in sb) if sb else None,
                "latency_ratio": statistics.median(lat) if lat else None,
                "errors": sum(r["status"] != 200 for r in sel),
            }
        )
    by = {(p["first"], p["second"]): p for p in out_pairs}
    same = [p for (f, s), p in by.items() if f == s]
    across = [p for (f, s), p in by.items() if f != s]
    reported = all(p["reused"] is not None for p in out_pairs) and bool(out_pairs)
    caches = reported and all(p["reused"] for p in same)
    return {
        "prefix_words": pc.prefix_words,
        "repeats": pc.repeats,
        "pairs": out_pairs,
        "cached_tokens_reported": reported,
        # the engine reuses a cached prefix for the same model ...
        "caches_prefixes": caches if reported else None,
        # ... and keeps it to that model: no other model (adapter or base) got any of it
        "separate_per_adapter": (caches and not any(p["reused"] for p in across)) if reported and caches else None,
        "errors": sum(p["errors"] for p in out_pairs),
    }


async def _probe(
    job: ServerJob, pc: PrefixCache, engine: Engine, inputs: JobInputs, http: aiohttp.ClientSession, base_url: str
) -> list[dict[str, Any]]:
    spec = inputs.spec
    rows: list[dict[str, Any]] = []
    # warm-up: every model once, on a prefix of its own (first requests compile kernels on some engines)
    for k, m in enumerate(["base", *sorted(spec.adapters)]):
        await ask(http, base_url, engine.request_model(spec, m), prefix_text(-1 - k, 32), job.request_timeout_s)
    todo = pairs(sorted(spec.adapters))
    for rep in range(pc.repeats):
        for k, (first, second) in enumerate(todo):
            prefix = prefix_text(job.shuffle_seed * 1000 + rep * 100 + k, pc.prefix_words)
            for order, (model, question) in enumerate(((first, " Question one?"), (second, " Question two?"))):
                r = await ask(
                    http, base_url, engine.request_model(spec, model), prefix + question, job.request_timeout_s
                )
                rows.append({"repeat": rep, "first": first, "second": second, "order": order, "model": model, **r})
            log.info(
                "prefix %s then %s (repeat %d): cached %s of %s prompt tokens, latency %.1f -> %.1f ms",
                first, second, rep, rows[-1]["cached_tokens"], rows[-1]["prompt_tokens"],
                rows[-2]["latency_ms"], rows[-1]["latency_ms"],
            )  # fmt: skip
    return rows


@dataclass
class PrefixResult:
    """A prefix-caching job's outputs: ``prefix.json`` (``prefix_result`` and the server's head) and the rows of
    every request."""

    result: Json
    rows: list[Json]

    def to_json(self) -> Json:
        return self.result

    def files(self) -> dict[str, Json | list[Json]]:
        return {"prefix.json": self.result, "records.jsonl": self.rows}


@dataclass
class PrefixCaching(JobKind):
    """Prefix caching across adapters (the module's docstring) on the job's server, started with the engine's
    report of cached prompt tokens on."""

    params: PrefixCache
    name: ClassVar[str] = "prefix_cache"
    folder: ClassVar[str] = "prefix_cache"
    files: ClassVar[tuple[str, ...]] = ("prefix.json", "records.jsonl")

    def settings(self) -> Json:
        return dataclasses.asdict(self.params)

    @classmethod
    def from_json(cls, text: str) -> PrefixCaching:
        return cls(PrefixCache(**kind_settings(text, cls.name)))

    def run(self, session: ServerSession) -> PrefixResult:
        with session.serving() as srv:
            rows = asyncio.run(self._pairs(session, srv.base_url))
        failed = [r for r in rows if r["status"] != 200]
        if failed:  # an answer from some pairs only would read as a complete one
            raise RuntimeError(
                f"{session.spec.server_id}: {len(failed)} of {len(rows)} prefix requests failed (HTTP "
                f"{failed[0]['status']}: {failed[0]['error']}); nothing of this job is kept (a shorter "
                "prefix_cache.prefix_words may help)"
            )
        result = {**prefix_result(rows, self.params), **session.side_head()}
        log.info("%s: caches prefixes %s, separate per adapter %s", session.spec.server_id, result["caches_prefixes"],
                 result["separate_per_adapter"])  # fmt: skip
        return PrefixResult(result, rows)

    async def _pairs(self, session: ServerSession, base_url: str) -> list[Json]:
        async with session.client(2) as http:
            return await _probe(session.job, self.params, session.engine, session.inputs, http, base_url)
