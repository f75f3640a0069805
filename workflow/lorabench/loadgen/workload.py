"""Request sets: generated once, with their seed, and fed unchanged to every engine, server and repetition.

A request set holds, for each condition and burst size, the ordered list of logical adapter names ("base" for
the base model) that the requests of one burst use. Assignment strategies are a registry keyed by name:
``cycle`` (a,b,a,b...), ``weighted`` (seeded draws by weight), ``zipf`` (seeded draws over many adapters with
a Zipf law, the usual shape of per-tenant traffic, as in SGLang's "skewed" and Punica's workloads), ``uniform``
(seeded draws, equal weights) and ``distinct`` (a seeded shuffle taken in order: every request of a burst no
larger than the set uses a different adapter).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

Assign = Callable[[dict[str, Any], int, random.Random], list[str]]
_STRATEGIES: dict[str, Assign] = {}


def strategy(name: str) -> Callable[[Assign], Assign]:
    def deco(fn: Assign) -> Assign:
        _STRATEGIES[name] = fn
        return fn

    return deco


@strategy("cycle")
def _cycle(cond: dict[str, Any], n: int, _rng: random.Random) -> list[str]:
    names = list(cond["adapters"])
    return [names[i % len(names)] for i in range(n)]


@strategy("weighted")
def _weighted(cond: dict[str, Any], n: int, rng: random.Random) -> list[str]:
    weights = cond.get("weights") or [1.0] * len(cond["adapters"])
    if len(weights) != len(cond["adapters"]):
        raise ValueError("conditions: 'weights' must have one entry per adapter")
    return rng.choices(list(cond["adapters"]), weights=weights, k=n)


@strategy("zipf")
def _zipf(cond: dict[str, Any], n: int, rng: random.Random) -> list[str]:
    s = float(cond.get("zipf_s", 1.1))
    names = list(cond["adapters"])
    weights = [1.0 / (i + 1) ** s for i in range(len(names))]
    return rng.choices(names, weights=weights, k=n)


@strategy("uniform")
def _uniform(cond: dict[str, Any], n: int, rng: random.Random) -> list[str]:
    return rng.choices(list(cond["adapters"]), k=n)


@strategy("distinct")
def _distinct(cond: dict[str, Any], n: int, rng: random.Random) -> list[str]:
    """A seeded shuffle of the adapters, taken in order (and shuffled again each time it runs out): no adapter
    repeats within the first len(adapters) requests."""
    names = list(cond["adapters"])
    out: list[str] = []
    while len(out) < n:
        perm = names[:]
        rng.shuffle(perm)
        out += perm
    return out[:n]


def strategies() -> list[str]:
    return sorted(_STRATEGIES)


def draw_adapters(cond: dict[str, Any], n: int, rng: random.Random, where: str = "conditions") -> list[str]:
    """``n`` adapter names for condition ``cond`` by its assignment strategy (open-loop runs draw their own
    sequences; ``where`` names the condition in the error)."""
    kind = cond.get("assignment", "cycle")
    if kind not in _STRATEGIES:
        raise ValueError(f"{where}.assignment: unknown {kind!r}; known: {strategies()}")
    return _STRATEGIES[kind](cond, n, rng)


def set_key(condition: str, burst: int) -> str:
    return f"{condition}/{burst}"


def build_request_set(
    workload: dict[str, Any], conditions: dict[str, dict[str, Any]], bursts: list[int]
) -> dict[str, Any]:
    """The whole request set of a study as one JSON-able dict."""
    seed = int(workload["seed"])
    sets: dict[str, list[dict[str, Any]]] = {}
    for cname in sorted(conditions):
        cond = conditions[cname]
        kind = cond.get("assignment", "cycle")
        if kind not in _STRATEGIES:
            raise ValueError(f"conditions.{cname}.assignment: unknown {kind!r}; known: {strategies()}")
        for burst in sorted(bursts):
            rng = random.Random(f"{seed}/{cname}/{burst}")
            names = _STRATEGIES[kind](cond, burst, rng)
            sets[set_key(cname, burst)] = [
                {"request_id": f"{cname}-{burst}-{i:03d}", "adapter": a} for i, a in enumerate(names)
            ]
    return {
        "seed": seed,
        "prompt": workload["prompt"],
        "max_tokens": int(workload["max_tokens"]),
        "temperature": float(workload["temperature"]),
        "ignore_eos": bool(workload["ignore_eos"]),
        "conditions": {k: dict(v) for k, v in sorted(conditions.items())},
        "bursts": sorted(bursts),
        "sets": sets,
    }
