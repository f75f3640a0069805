"""Rank, targets and max_lora_rank headroom: the report's cost tables and the rank claim's verdict, on small
synthetic summary tables (no server)."""

from __future__ import annotations

import pytest

from lorabench.claims import Context, evaluate, load_claims
from lorabench.report_model import _union_engines, rank_rows

from .conftest import ROOT

ADAPTERS = [
    {"name": "r8", "rank": 8, "target_modules": ["q_proj", "v_proj"], "trainable_parameters": 100},
    {"name": "r64", "rank": 64, "target_modules": ["q_proj", "v_proj"], "trainable_parameters": 800},
]


def _row(server: str, cond: str, med: float, spread: float, max_rank: int) -> dict:
    return {
        "server": server,
        "engine": "vllm",
        "condition": cond,
        "adapters": cond,
        "burst": 8,
        "lora": True,
        "max_loras": 1,
        "max_lora_rank": max_rank,
        "status": "ok",
        "throughput_median": med,
        "throughput_min": med - spread,
        "throughput_max": med + spread,
    }


def _rows(r64: float, spread: float = 5.0) -> list[dict]:
    return [
        _row("rank8", "base", 1000, 5, 8),
        _row("rank8", "r8", 900, 5, 8),
        _row("rank64", "base", 1000, 5, 64),
        _row("rank64", "r8", 850, 5, 64),
        _row("rank64", "r64", r64, spread, 64),
    ]


def test_cost_per_rank_and_headroom():
    t = rank_rows(_rows(700), ADAPTERS, "base")
    cost = {(r["server"], r["condition"]): r for r in t["cost"]}
    assert cost[("rank64", "r64")]["pct"] == pytest.approx(-30.0)
    assert "beyond our spread" in cost[("rank64", "r64")]["finding"]
    assert cost[("rank64", "r64")]["targets"] == "q,v"
    (h,) = t["headroom"]
    assert (h["condition"], h["small_rank"], h["big_rank"]) == ("r8", 8, 64)
    assert h["pct"] == pytest.approx(100 * (850 / 900 - 1))
    assert rank_rows([_row("s", "base", 1, 0, 8), _row("s", "r8", 1, 0, 8)], ADAPTERS, "base") == {
        "cost": [],
        "headroom": [],
        "union": [],
    }


@pytest.mark.parametrize(
    ("r64", "spread", "verdict"),
    [(700, 5, "reproduced"), (900, 5, "contradicted"), (840, 60, "inconclusive")],
)
def test_rank_claim_needs_its_whole_span_below_zero(r64, spread, verdict):
    ctx = Context({"rows": _rows(r64, spread), "facts": []}, {"parameters": 1000}, ADAPTERS, None, None)
    claims = [c for c in load_claims(ROOT / "config" / "claims.yaml") if c["id"] == "op-rank-changes-cost"]
    (r,) = evaluate(claims, ctx)
    assert r.verdict == verdict, r.why


def test_each_engine_has_its_own_rank_claim():
    """A study with both engines' rank-64 servers: the vLLM claim reads vLLM's server only and the SGLang one
    SGLang's (without the engine in the selectors both would read the first server by id, SGLang's)."""
    sglang = [{**r, "server": "sg-" + r["server"], "engine": "sglang"} for r in _rows(700)]
    vllm = _rows(900)
    ctx = Context({"rows": vllm + sglang, "facts": []}, {"parameters": 1000}, ADAPTERS, None, None)
    ids = ("op-rank-changes-cost", "op-rank-changes-cost-sglang")
    got = {r.id: r for r in evaluate([c for c in load_claims(ROOT / "config" / "claims.yaml") if c["id"] in ids], ctx)}
    assert got["op-rank-changes-cost"].evidence == ["rank64/r64/8", "rank64/r8/8"]
    assert got["op-rank-changes-cost"].verdict == "contradicted"  # 900 against 850: faster
    assert got["op-rank-changes-cost-sglang"].evidence == ["sg-rank64/r64/8", "sg-rank64/r8/8"]
    assert got["op-rank-changes-cost-sglang"].verdict == "reproduced"  # 700 against 850


def test_a_server_whose_lora_layers_cover_its_adapters_union_is_named_with_that_union():
    """On an engine whose LoRA layers cover the union of the served adapters' targets (SGLang), a server measuring
    adapters of different targets is listed with the union; one of a single kind of target, or another engine's
    server, is not."""
    adapters = [*ADAPTERS, {"name": "r8-all", "rank": 8, "target_modules": ["q_proj", "v_proj", "down_proj", "up_proj"],
                            "trainable_parameters": 300}]  # fmt: skip
    rows = [*_rows(700), _row("rank64", "r8-all", 800, 5, 64), _row("rank8", "r8-all", 880, 5, 8)]
    rows += [{**r, "server": "sg-" + r["server"], "engine": "sglang"} for r in rows]
    rows.append({**_row("sg-qv", "r8", 900, 5, 8), "engine": "sglang"})
    got = rank_rows(rows, adapters, "base", ["sglang"])["union"]
    assert got == [{"servers": ["sg-rank64", "sg-rank8"], "targets": "q,v,up,down"}]
    assert rank_rows(rows, adapters, "base")["union"] == []


def test_the_engines_whose_lora_layers_cover_the_union_are_read_from_the_rows_kinds():
    """Rows name an engine by its kind (the default config's SGLang is engine id "sglang-gpu", its rows "sglang"):
    the union note follows the kind, so it holds for any engine id."""
    rows = [{**_row("s", "r8", 900, 5, 8), "engine": "sglang"}, _row("v", "r8", 900, 5, 8)]
    assert _union_engines(rows) == ["sglang"]
