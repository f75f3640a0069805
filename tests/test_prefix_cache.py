"""Prefix caching across adapters: the config, the job and what a run's requests add up to (no server)."""

from __future__ import annotations

import copy

import pytest

from lorabench.config import ConfigError
from lorabench.job import PrefixCache, ServerJob, prefix_cache_params, server_job
from lorabench.prefix_cache import PrefixCaching, pairs, prefix_result, prefix_text

from .test_config import DEFAULT, check


def _cfg(**pc) -> dict:
    cfg = copy.deepcopy(DEFAULT)
    cfg["prefix_cache"] = {"server": "lora-2", **pc}
    return cfg


def test_the_job_reports_cached_tokens_and_round_trips():
    cfg = check(_cfg(prefix_words=64))
    job = server_job(cfg, "lora-2", "cpu", prefix=True)
    kind = PrefixCaching(prefix_cache_params(cfg))
    assert job.server_id == "lora-2-prefix" and kind.params == PrefixCache(prefix_words=64, repeats=3)
    assert PrefixCaching.from_json(kind.to_json()) == kind
    assert job.server.args["enable_prompt_tokens_details"] is True  # vLLM's flag for usage.prompt_tokens_details
    assert ServerJob.from_json(job.to_json()) == job
    # the measured server of the same name is left as it is
    assert "enable_prompt_tokens_details" not in server_job(check(_cfg()), "lora-2", "cpu").server.args


@pytest.mark.parametrize(
    "pc, message",
    [
        ({"server": "nope"}, "prefix_cache.server: unknown server 'nope'"),
        ({"server": "lora-off"}, "prefix_cache.server: 'lora-off' serves no adapter"),
        ({"server": "lora-2", "prefix_word": 10}, "prefix_word"),
    ],
)
def test_a_bad_prefix_cache_key_is_named(pc, message):
    cfg = copy.deepcopy(DEFAULT)
    cfg["prefix_cache"] = pc
    with pytest.raises(ConfigError, match=message):
        check(cfg)


def test_no_prefix_cache_configured_means_no_job():
    with pytest.raises(ConfigError, match="prefix_cache: not configured"):
        server_job(check(copy.deepcopy(DEFAULT)), "lora-2", "cpu", prefix=True)


def test_pairs_and_prefixes():
    assert pairs(["a", "b"]) == [("base", "base"), ("a", "a"), ("a", "b"), ("base", "a"), ("a", "base")]
    assert ("a", "b") not in pairs(["a"])
    assert prefix_text(1, 50) == prefix_text(1, 50) != prefix_text(2, 50)
    assert len(prefix_text(1, 50).split()) == 50


def _rows(cached: dict[tuple[str, str], int], reported: bool = True) -> list[dict]:
    out = []
    for rep in range(2):
        for (first, second), c in cached.items():
            for order, model, n in ((0, first, 0), (1, second, c)):
                out.append({"repeat": rep, "first": first, "second": second, "order": order, "model": model,
                            "status": 200, "latency_ms": 10.0 if order == 0 else 10.0 - n / 40,
                            "prompt_tokens": 200, "cached_tokens": n if reported else None})  # fmt: skip
    return out


def test_a_cache_kept_per_adapter():
    got = prefix_result(
        _rows({("base", "base"): 192, ("a", "a"): 192, ("a", "b"): 0, ("base", "a"): 0, ("a", "base"): 0}),
        PrefixCache(prefix_words=200, repeats=2),
    )
    assert got["cached_tokens_reported"] and got["caches_prefixes"] and got["separate_per_adapter"]
    same = next(p for p in got["pairs"] if (p["first"], p["second"]) == ("a", "a"))
    assert same["second_cached_share"] == 0.96 and same["reused"] and same["latency_ratio"] < 1
    assert same["first_cached_share"] == 0 and same["repeats"] == 2


def test_a_cache_shared_across_adapters_and_one_not_reported():
    shared = prefix_result(
        _rows({("base", "base"): 192, ("a", "a"): 192, ("a", "b"): 192, ("base", "a"): 0}), PrefixCache()
    )
    assert shared["caches_prefixes"] and shared["separate_per_adapter"] is False
    none = prefix_result(_rows({("base", "base"): 0, ("a", "a"): 0}), PrefixCache())
    assert none["caches_prefixes"] is False and none["separate_per_adapter"] is None
    silent = prefix_result(_rows({("base", "base"): 0}, reported=False), PrefixCache())
    assert not silent["cached_tokens_reported"] and silent["caches_prefixes"] is None
