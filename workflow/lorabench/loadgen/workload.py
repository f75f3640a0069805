"""Request sets: generated once, with their seed, and fed unchanged to every engine, server and repetition.

A request set holds, for each condition and burst size, the ordered list of logical adapter names ("base" for
the base model) that the requests of one burst use. Assignment strategies are a registry keyed by name:
``cycle`` (a,b,a,b...), ``weighted`` (seeded draws by weight), ``zipf`` (seeded draws over many adapters with
a Zipf law, the usual shape of per-tenant traffic, as in SGLang's "skewed" and Punica's workloads), ``uniform``
(seeded draws, equal weights) and ``distinct`` (a seeded shuffle taken in order: every request of a burst no
larger than the set uses a different adapter).

Schema 2 (``lorabench.requests/2``) adds what each request asks for: its prompt, a reference into a table of the
set's distinct prompts, and its ``max_tokens``, from the condition's workload (traffic.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from .prompts import Prompt, TokenCounter
from .traffic import DEFAULT_WORKLOAD, check_fits, length_stats, workload_of, workload_specs

# The base model's name in a burst's adapter list (as roles.BASE, which the measuring jobs do not import: their code
# inputs stay free of analysis modules, tests/test_rerun_tracking.py)
BASE = "base"

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


def burst_adapters(cname: str, cond: dict[str, Any], burst: int, seed: int) -> list[str]:
    """The adapters of one burst of condition ``cname``, in request order: the same in every cycle, every server
    and every engine (its own seeded draw per condition and burst size)."""
    return draw_adapters(cond, burst, random.Random(f"{seed}/{cname}/{burst}"), f"conditions.{cname}")


def slot_rounds(adapters: list[str], slots: int | None, base_takes_slot: bool = False) -> list[int]:
    """How a burst's requests pass through ``slots`` adapter slots when all its requests are alike: the number of
    distinct adapters in each round (the engine's scheduler admits, in order, every waiting request whose adapter
    is loaded or still finds a free slot, and the rest wait for the round to end). Base-model requests need no
    slot and run in the first round, unless ``base_takes_slot`` (SGLang: the base model mixed into a LoRA batch
    takes one); one round (of its distinct adapters) where the slots hold them all."""
    waiting = [a for a in adapters if a != BASE or (base_takes_slot and len(set(adapters)) > 1)]
    if not waiting:
        return [0]
    if not slots or slots >= len(set(waiting)):
        return [len(set(waiting))]
    rounds: list[int] = []
    while waiting:
        loaded: set[str] = set()
        rest = []
        for a in waiting:
            if a in loaded or len(loaded) < slots:
                loaded.add(a)
            else:
                rest.append(a)
        rounds.append(len(loaded))
        waiting = rest
    return rounds


REQUESTS_SCHEMA = "lorabench.requests/2"


def build_request_set(
    workload: dict[str, Any],
    conditions: dict[str, dict[str, Any]],
    bursts: list[int],
    workloads: dict[str, Any] | None = None,
    counter: TokenCounter | None = None,
    limits: dict[str, tuple[int, str]] | None = None,
) -> dict[str, Any]:
    """The whole request set of a study as one JSON-able dict.

    Each request of a burst names its adapter (the condition's assignment), its prompt (an index into the prompt
    table ``prompts``, which holds each distinct text once with its length in tokens, asked for and counted) and
    its ``max_tokens``; a condition's requests come from its workload (traffic.py), ``counter`` counts tokens with
    the study's tokenizer, ``limits`` (traffic.context_limits) bound each condition's prompt plus output. The top
    level ``prompt`` and ``max_tokens`` are the default workload's first request, for requests outside the sets
    (runtime loading)."""
    seed = int(workload["seed"])
    specs = workload_specs(workload, workloads)
    n = max(bursts)
    drawn = {name: spec.requests(n, seed, counter) for name, spec in specs.items()}
    table: list[Prompt] = []
    index: dict[Prompt, int] = {}

    def ref(p: Prompt) -> int:
        if p not in index:
            index[p] = len(table)
            table.append(p)
        return index[p]

    sets: dict[str, list[dict[str, Any]]] = {}
    for cname in sorted(conditions):
        cond = conditions[cname]
        kind = cond.get("assignment", "cycle")
        if kind not in _STRATEGIES:
            raise ValueError(f"conditions.{cname}.assignment: unknown {kind!r}; known: {strategies()}")
        wname = workload_of(cond)
        if wname not in specs:
            raise ValueError(f"conditions.{cname}.workload: unknown workload {wname!r} (known: {sorted(specs)})")
        check_fits(specs[wname], drawn[wname], cname, (limits or {}).get(cname))
        for burst in sorted(bursts):
            names = burst_adapters(cname, cond, burst, seed)
            sets[set_key(cname, burst)] = [
                {"request_id": f"{cname}-{burst}-{i:03d}", "adapter": a, "prompt": ref(p), "max_tokens": m}
                for i, (a, (p, m)) in enumerate(zip(names, drawn[wname], strict=False))
            ]
    first_prompt, first_max = drawn[DEFAULT_WORKLOAD][0]
    used = {workload_of(c) for c in conditions.values()}
    return {
        "schema": REQUESTS_SCHEMA,
        "seed": seed,
        "prompt": first_prompt.text,
        "max_tokens": first_max,
        "temperature": float(workload["temperature"]),
        "ignore_eos": bool(workload["ignore_eos"]),
        "workloads": {
            name: {
                "description": spec.description or spec.describe(),
                "conditions": sorted(c for c in conditions if workload_of(conditions[c]) == name),
                "prompt_tokens": length_stats([p.tokens for p, _ in drawn[name]]),
                "prompt_tokens_intended": length_stats([p.tokens_intended for p, _ in drawn[name]]),
                "output_tokens": length_stats([m for _, m in drawn[name]]),
            }
            for name, spec in specs.items()
            if name in used or name == DEFAULT_WORKLOAD
        },
        "prompts": [p.to_json() for p in table],
        "conditions": {k: dict(v) for k, v in sorted(conditions.items())},
        "bursts": sorted(bursts),
        "sets": sets,
    }


def request_shapes(rset: dict[str, Any], rows: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(prompt text, max_tokens) of each request of a burst set: the row's entry of the prompt table and its
    max_tokens; a request set of the first schema (no per-request prompts) gives every row its one prompt."""
    prompts = rset.get("prompts")
    return [
        (prompts[r["prompt"]]["text"], int(r["max_tokens"]))
        if prompts is not None and "prompt" in r
        else (str(rset["prompt"]), int(rset["max_tokens"]))
        for r in rows
    ]
