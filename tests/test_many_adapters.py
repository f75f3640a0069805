"""Many adapters declared compactly (adapter families) and conditions drawn from a popularity distribution with a
fixed seed: expansion, clear errors, and the request sets each assignment gives (no server)."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import yaml

from lorabench.claims import Verdict
from lorabench.config import ConfigError
from lorabench.loadgen.workload import build_request_set, burst_adapters, slot_rounds

from .conftest import ROOT
from .test_config import check

DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
WORKLOAD = {"prompt": "p", "max_tokens": 4, "temperature": 0.0, "ignore_eos": True, "seed": 7}


def with_family(count=32, cond_count=8, assignment="zipf"):
    cfg = copy.deepcopy(DEFAULT)
    cfg["adapter_families"] = {"m": {"count": count, "rank": 8, "seed_base": 100}}
    cfg["conditions"]["m8"] = {"family": {"name": "m", "count": cond_count}, "assignment": assignment}
    cfg["servers"]["lora-4"]["conditions"].append("m8")
    return cfg


def test_family_expands_into_adapters_and_condition_lists():
    cfg = check(with_family())
    assert [a for a in cfg["adapters"] if a.startswith("m-")] == [f"m-{i:03d}" for i in range(32)]
    assert cfg["adapters"]["m-005"] == {
        "rank": 8,
        "alpha": 16,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "init_lora_b_std": 0.02,
        "seed": 105,
    }
    assert cfg["conditions"]["m8"]["adapters"] == [f"m-{i:03d}" for i in range(8)]
    again = check(copy.deepcopy(cfg))  # expanding an expanded config changes nothing
    assert again["adapters"] == cfg["adapters"] and again["conditions"] == cfg["conditions"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c["conditions"]["m8"]["family"].update(name="x"), "conditions.m8.family.name"),
        (lambda c: c["conditions"]["m8"]["family"].update(count=33), "conditions.m8.family.count"),
        (lambda c: c["adapters"].update({"m-003": {"rank": 4, "seed": 1}}), "adapter_families.m"),
        (lambda c: c["adapter_families"]["m"].pop("seed_base"), "adapter_families.m"),
        (lambda c: c["conditions"]["m8"].update(assignment="popular"), "conditions.m8.assignment"),
    ],
)
def test_family_errors_name_the_key(mutate, expected):
    cfg = with_family()
    mutate(cfg)
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        check(cfg)


def test_unloaded_family_member_is_refused():
    cfg = with_family()
    cfg["servers"]["lora-4"]["adapters"] = ["a", "b", "c"]
    with pytest.raises(ConfigError, match=r"servers\.lora-4\.conditions: 'm8' uses adapters not loaded"):
        check(cfg)


def _draws(assignment: str, n_adapters: int, burst: int, **extra) -> list[str]:
    cond = {"adapters": [f"m-{i:03d}" for i in range(n_adapters)], "assignment": assignment, **extra}
    rset = build_request_set(WORKLOAD, {"c": cond}, [burst])
    return [r["adapter"] for r in rset["sets"][f"c/{burst}"]]


def test_distinct_uses_every_adapter_once_per_pass():
    d = _draws("distinct", 32, 32)
    assert sorted(d) == [f"m-{i:03d}" for i in range(32)] and d != sorted(d)
    d2 = _draws("distinct", 8, 20)
    assert all(v in (2, 3) for v in Counter(d2).values()) and len(set(d2[:8])) == 8


def test_popularity_draws_are_seeded_and_shaped():
    z = _draws("zipf", 128, 2000, zipf_s=1.1)
    assert z == _draws("zipf", 128, 2000, zipf_s=1.1)  # same seed, same sequence
    counts = Counter(z)
    assert counts["m-000"] > 5 * counts.get("m-099", 1)  # head far above the tail
    u = Counter(_draws("uniform", 8, 4000))
    assert len(u) == 8 and max(u.values()) < 1.2 * min(u.values())
    assert _draws("uniform", 8, 50) != _draws("distinct", 8, 50)


def test_a_burst_passes_the_slots_in_rounds():
    # three adapters on two slots (h200-8b's abc on 2 slots): a and b first, c when they are done
    assert slot_rounds(["a", "b", "c"] * 16, 2) == [2, 1]
    assert slot_rounds(["a", "b", "c"] * 16, 4) == [3]
    assert slot_rounds(["base"] * 48, 2) == [0]  # the base model needs no slot
    assert slot_rounds(["a", "base", "b"] * 16, 2) == [2]
    # on SGLang base-model requests in a LoRA batch take a slot of their own
    assert slot_rounds(["a", "base", "b"] * 16, 2, base_takes_slot=True) == [2, 1]
    assert slot_rounds(["base"] * 48, 2, base_takes_slot=True) == [0]
    # every request of a round is admitted in order: an adapter already loaded never waits
    assert slot_rounds(["a", "b", "c", "a", "d", "b"], 2) == [2, 2]
    assert slot_rounds([f"m-{i:03d}" for i in range(48)], 8) == [8] * 6


def test_burst_adapters_are_the_request_sets_draw():
    cond = {"adapters": [f"m-{i:03d}" for i in range(32)], "assignment": "zipf", "zipf_s": 1.5}
    rset = build_request_set(
        {"prompt": "p", "max_tokens": 4, "temperature": 0.0, "ignore_eos": True, "seed": 7}, {"z": cond}, [3, 48]
    )
    for burst in (3, 48):
        assert [r["adapter"] for r in rset["sets"][f"z/{burst}"]] == burst_adapters("z", cond, burst, 7)


def _row(server: str, cond: str, n: int, med: float, lo: float, hi: float, cache: int = 16) -> dict:
    return {
        "server": server,
        "engine": "vllm",
        "condition": cond,
        "burst": 8,
        "lora": True,
        "max_loras": 4,
        "max_cpu_loras": cache,
        "adapters": "|".join(f"m-{i:03d}" for i in range(n)),
        "status": "ok",
        "throughput_median": med,
        "throughput_min": lo,
        "throughput_max": hi,
        "throughput_ci_lo": lo,
        "throughput_ci_hi": hi,
    }


def _scaling_verdict(rows: list[dict]) -> Verdict:
    from lorabench.claims import Context, evaluate, load_claims

    conds = {
        "n4-uniform": {"assignment": "uniform"},
        "n16-uniform": {"assignment": "uniform"},
        "n16-zipf": {"assignment": "zipf"},
    }
    ctx = Context({"rows": rows, "facts": [], "conditions": conds}, {"parameters": 1000}, [], None, None)
    claims = [c for c in load_claims(ROOT / "config" / "claims.yaml") if c["id"] == "ext-slora-adapter-scaling"]
    (r,) = evaluate(claims, ctx)
    return r


def test_slora_claim_judged_from_adapter_counts():
    flat = [_row("s", "n4-uniform", 4, 1000, 990, 1010), _row("s", "n16-uniform", 16, 960, 950, 970)]
    r = _scaling_verdict(flat)
    assert r.verdict == "reproduced" and abs(r.measured - -4.0) < 1e-9
    assert "16 adapters" in r.why and "4 adapters" in r.why
    cliff = [_row("s", "n4-uniform", 4, 1000, 990, 1010), _row("s", "n16-uniform", 16, 500, 490, 510)]
    assert _scaling_verdict(cliff).verdict == "contradicted"
    noisy = [_row("s", "n4-uniform", 4, 1000, 700, 1300), _row("s", "n16-uniform", 16, 700, 600, 1000)]
    assert _scaling_verdict(noisy).verdict == "inconclusive"  # -30 % median, but the span covers the claim
    assert _scaling_verdict([_row("s", "n16-zipf", 16, 1, 1, 1)]).verdict == "not run"


def test_slora_claim_pairs_the_two_counts_per_cycle():
    """Both counts are cells of one server job: the claim reads the median of each cycle's ratio and its interval,
    as a ratio claim does, not the ratio of the two medians (here -4.5 % against -4.0 %)."""
    few_t = (1000, 1100, 900, 1050, 950, 1000, 1020, 980, 1010)
    many_t = (950, 1050, 860, 980, 930, 960, 1000, 930, 960)

    def cycles(ts: tuple[int, ...]) -> str:
        return " ".join(f"0.{c}:{t}" for c, t in enumerate(ts))

    few = {**_row("s", "n4-uniform", 4, 1000, 950, 1050), "throughput_by_cycle": cycles(few_t)}
    many = {**_row("s", "n16-uniform", 16, 960, 930, 1000), "throughput_by_cycle": cycles(many_t)}
    r = _scaling_verdict([few, many])
    ratios = sorted(m / f for m, f in zip(many_t, few_t, strict=True))
    assert r.measured == pytest.approx(100 * (ratios[4] - 1))
    assert "9 pairs of measurements taken close together" in r.why
    assert r.verdict == "reproduced"


def test_many_adapter_rows_and_plot(tmp_path):
    from lorabench import plots
    from lorabench.report_model import many_adapter_rows

    rows = [_row("s", "n16-uniform", 16, 960, 950, 970), _row("s", "n4-uniform", 4, 1000, 990, 1010)]
    rows.append({**rows[0], "condition": "a", "adapters": "a"})
    conds = {
        "n4-uniform": {"assignment": "uniform", "adapters": [f"m-{i:03d}" for i in range(4)]},
        "n16-uniform": {"assignment": "uniform", "adapters": [f"m-{i:03d}" for i in range(16)]},
        "a": {"adapters": ["a"]},
    }
    q = {"servers": [{"server": "s", "cells": [{"condition": "n4-uniform", "burst": 8, "ttft_p99_ms": 80.0}]}]}
    many = many_adapter_rows(rows, q, conds)
    assert [r["n_adapters"] for r in many] == [4, 16] and many[0]["ttft_p99_ms"] == 80.0
    # two Zipf laws over the same adapters are told apart by their exponent
    zipf = {f"n16-zipf{s}": {"assignment": "zipf", "zipf_s": s, "adapters": conds["n16-uniform"]["adapters"]}
            for s in (1.1, 1.5)}  # fmt: skip
    zrows = [{**rows[0], "condition": c} for c in zipf]
    assert [r["assignment"] for r in many_adapter_rows(zrows, q, zipf)] == ["zipf s=1.1", "zipf s=1.5"]
    out = plots.adapter_scaling(many, tmp_path / "m.png")
    assert out and out.stat().st_size > 5000


def test_the_slot_cliff_chart_is_drawn_only_where_a_condition_ran_on_two_slot_counts(tmp_path):
    """A study of one LoRA server, or of servers of one slot count, has no slot cliff to draw: no chart (the
    Llama-2-7B studies once showed an empty one), where two slot counts give one."""
    from lorabench import plots

    def row(server: str, slots: int, condition: str, tok_s: float) -> dict:
        return {**_row(server, condition, 1, tok_s, tok_s, tok_s), "max_loras": slots}

    one_server = [row("ml32", 32, "base", 5000.0), row("ml32", 32, "uniform", 2500.0)]
    assert plots.slot_cliff(one_server, tmp_path / "a.png", skip="base") is None
    # two slot counts, but only the base model's condition on both: nothing to draw either
    base_only = [*one_server, row("ml2", 2, "base", 5100.0)]
    assert plots.slot_cliff(base_only, tmp_path / "b.png", skip="base") is None
    assert not list(tmp_path.glob("*.png"))
    two = [*base_only, row("ml2", 2, "uniform", 900.0)]
    out = plots.slot_cliff(two, tmp_path / "c.png", skip="base")
    assert out and out.stat().st_size > 5000


def test_the_many_adapters_section_names_every_claim_judged_on_drawn_adapters():
    """The section lists the adapter-scaling claims and the ratio claims with a side on one of its conditions, those
    drawn from a popularity law (SGLang's slot cliff in TTFT: 32 drawn adapters against 8), not the claims on a mix
    taken in turn."""
    from lorabench.report_model import many_adapter_verdicts

    config = {"conditions": {"n8-uniform": {"family": {"name": "m", "count": 8}, "assignment": "uniform"},
                             "ab": {"adapters": ["a", "b"], "assignment": "cycle"}}}  # fmt: skip

    def claim(cid: str, measure: dict) -> dict:
        return {"id": cid, "measure": measure}

    claims = [
        claim("scaling", {"kind": "adapter_scaling", "assignment": "uniform"}),
        claim("cliff-ttft", {"kind": "ratio", "num": {"condition": "n32-uniform"}, "den": {"condition": "n8-uniform"}}),
        claim("fixed", {"kind": "ratio", "num": {"condition": "ab"}, "den": {"condition": "base"}}),
        claim("probe", {"kind": "probe", "probe": "wrong_model_rejected"}),
    ]
    assert [c["id"] for c in many_adapter_verdicts(claims, config)] == ["scaling", "cliff-ttft"]
    assert [c["id"] for c in many_adapter_verdicts(claims, {})] == ["scaling"]
