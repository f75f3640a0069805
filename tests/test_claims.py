"""Claims evaluated on recorded real results (tests/fixtures/cpu-run: a real default-study run)."""

from __future__ import annotations

import copy

import pytest

from lorabench.claims import Context, Verdict, _below_margin, _decide_threshold, apply_rule, evaluate, load_claims
from lorabench.engines.base import models_listed_ok
from lorabench.io import read_json

from .conftest import FIXTURES, ROOT, STUDIES

RUN = FIXTURES / "cpu-run"


@pytest.fixture(scope="module")
def ctx() -> Context:
    return Context(
        read_json(RUN / "summary.json"),
        read_json(RUN / "model.json"),
        [read_json(RUN / f"adapter-{a}.json") for a in "abc"],
        read_json(ROOT / "config" / "models" / "qwen3-1.7b.json"),
    )


@pytest.fixture(scope="module")
def results(ctx: Context) -> dict[str, Verdict]:
    return {r.id: r for r in evaluate(load_claims(ROOT / "config" / "claims.yaml"), ctx)}


def test_registry_is_complete_and_unique():
    claims = load_claims(ROOT / "config" / "claims.yaml")
    assert len(claims) >= 40
    sections = {(c["source"][:3], str(c["section"])) for c in claims}
    for s in ("2", "3", "4", "4-1", "5", "6", "7"):
        assert ("000", s) in sections, s
    assert any(c["source"].startswith("002") for c in claims) and any(c["source"].startswith("003") for c in claims)


# The verdict of every claim on the committed CPU run that is not "not comparable" (the GPU figures, the 1.7B
# model's figures against the tiny model's, external figures: each says which of the three).
VERDICT_ON_CPU_RUN = {
    "s2-adapter-rank-8": "reproduced",
    "s41-adapter-rank-16": "contradicted",
    "op-wrong-model-rejected": "reproduced",
    "op-models-listed": "reproduced",
    "op-max-cpu-loras-at-least-max-loras": "reproduced",
    "s4-cliff-cause-deferral": "not run",  # no queue figures in the default study
    "s4-gpu-mem-lora-on": "not run",
    "s4-gpu-mem-lora-off": "not run",
    "s41-sgl-b48-base": "not run",
    "s41-sgl-b48-adapter-a": "not run",
    "s41-sgl-ml2-base": "not run",
    "s41-sgl-ml2-ab": "not run",
    "s41-sgl-ml2-abc": "not run",
    "s41-sgl-ml4-abc": "not run",
    "s41-sgl-slot-cliff": "not run",
    "s5-cuda-graphs-lora-on": "not run",
    "s5-cuda-graphs-lora-off": "not run",
    "ext-slora-adapter-scaling": "not run",
    "ext-slora-adapter-scaling-sglang": "not run",
    "op-rank-changes-cost": "not run",
    "op-rank-changes-cost-sglang": "not run",
    "ext-vllm-pr11267-7b-rank8": "not run",  # no rank-8 server of max_lora_rank 8 in the default study
    "ext-sglang-pr13349-slot-cliff-ttft": "not run",
    "ext-punica-7b": "not run",  # no "identical" condition (Punica's, study llama2-7b-rank16) in the default study
    "ext-punica-7b-sglang": "not run",
    "open-prefix-cache-per-adapter": "not run",
    "op-prefix-cache-reuse": "not run",
}
NOT_COMPARABLE_BECAUSE = ("claim measured on a GPU", "claim's model has", "external figure from another system")


def test_every_claim_gets_its_verdict_on_the_cpu_run(results):
    assert set(VERDICT_ON_CPU_RUN) <= set(results), set(VERDICT_ON_CPU_RUN) - set(results)
    verdicts = {i: r.verdict for i, r in results.items()}
    assert verdicts == {i: VERDICT_ON_CPU_RUN.get(i, "not comparable") for i in results}
    for r in results.values():
        if r.verdict == "not comparable":
            assert r.why.startswith(NOT_COMPARABLE_BECAUSE), r


def test_gpu_figures_on_cpu_are_not_comparable_with_our_figure_shown(results):
    # The source's one-adapter cost on the GPU (section 3, burst 48): a ratio this CPU run also measures.
    r = results["s3-b48-adapter-a"]
    assert r.measure["kind"] == "ratio"
    assert r.verdict == "not comparable"
    assert "this run: CPU" in r.why and "For reference" in r.why
    assert r.measured is not None


def test_sglang_claims_not_run_on_cpu(results):
    sgl = [r for r in results.values() if r.id.startswith("s41-sgl")]
    assert sgl and all(r.verdict == "not run" for r in sgl)
    assert any("needs a GPU" in r.why for r in sgl)


def test_rank_inconsistency_resolved_by_computation(results):
    assert results["s2-adapter-rank-8"].verdict == "reproduced"
    assert results["s41-adapter-rank-16"].verdict == "contradicted"
    assert "6,422,528" in results["s41-adapter-rank-16"].why


def test_operational_claims_from_real_probes(results):
    assert results["op-wrong-model-rejected"].verdict == "reproduced"
    assert results["op-models-listed"].verdict == "reproduced"
    assert results["op-max-cpu-loras-at-least-max-loras"].verdict == "reproduced"
    assert "max_cpu_loras (1) must be >= max_loras (2)" in results["op-max-cpu-loras-at-least-max-loras"].why


def test_adapter_share_on_the_tiny_model_is_not_comparable(results, ctx):
    r = results["s2-adapter-trainable-params"]
    assert r.verdict == "not comparable" and r.measured == ctx.adapters[0]["trainable_parameters"]


def test_comparable_run_gets_a_real_verdict(ctx):
    """The same claims on a context that claims GPU hardware and the 1.7B model: rules decide, not scope."""
    gpu = copy.copy(ctx)
    gpu.hardware = "gpu"
    gpu.model_params = 1_720_574_976
    claims = [
        c
        for c in load_claims(ROOT / "config" / "claims.yaml")
        if c["measure"]["kind"] == "ratio"
        and c["scope"].get("engine") != "sglang"
        and c["scope"].get("model_params") in (None, 1_720_574_976)
    ]
    out = evaluate(claims, gpu)
    assert {r.verdict for r in out} <= {"reproduced", "direction only", "contradicted", "not run"}


@pytest.mark.parametrize(
    ("claimed", "rule", "value", "verdict"),
    [
        ({"value": -10.3, "unit": "pct"}, {"type": "within", "tolerance": 3}, -12.0, "reproduced"),
        ({"value": -10.3, "unit": "pct"}, {"type": "within", "tolerance": 3}, -25.0, "direction only"),
        ({"value": -10.3, "unit": "pct"}, {"type": "within", "tolerance": 3}, 4.0, "contradicted"),
        ({"low": -18, "high": -8, "unit": "pct"}, {"type": "range", "tolerance": 2}, -19.5, "reproduced"),
        ({"value": -44.3, "unit": "pct"}, {"type": "less_than", "value": -40}, -10.0, "contradicted"),
        ({"value": True, "unit": "bool"}, {"type": "true"}, True, "reproduced"),
        ({"value": 3211264, "unit": "count"}, {"type": "equals"}, 3211264, "reproduced"),
    ],
)
def test_rules(claimed, rule, value, verdict):
    claim = {"id": "x", "claimed": claimed, "rule": rule, "measure": {"kind": "ratio"}}
    assert apply_rule(claim, value) == verdict


@pytest.mark.parametrize(
    ("rule", "span", "verdict"),
    [
        ({"type": "less_than", "value": 0, "decisive": True}, (-4.0, -0.5), "reproduced"),
        ({"type": "less_than", "value": 0, "decisive": True}, (-1.0, 0.8), "inconclusive"),
        ({"type": "less_than", "value": 0, "decisive": True, "negligible": 3}, (-1.0, 0.8), "contradicted"),
        ({"type": "less_than", "value": 0, "decisive": True, "negligible": 3}, (-3.5, 0.8), "inconclusive"),
        ({"type": "less_than", "value": 0, "decisive": True, "negligible": 3}, (0.2, 1.8), "contradicted"),
        ({"type": "greater_than", "value": 0, "decisive": True, "negligible": 3}, (-5.0, 2.9), "contradicted"),
        ({"type": "greater_than", "value": 0, "decisive": True, "negligible": 3}, (-1.0, 3.1), "inconclusive"),
    ],
)
def test_a_threshold_claim_is_decided_by_its_whole_span_or_its_negligible_margin(rule, span, verdict):
    """Across the threshold, a span that reaches less than the margin onto the claim's side contradicts the claim
    of an effect (an equivalence bound); one that reaches further, or a rule without a margin, stays
    inconclusive."""
    median = (span[0] + span[1]) / 2
    claim = {"id": "x", "claimed": {"value": True, "unit": "bool"}, "rule": rule, "measure": {"kind": "ratio"}}
    got, why = apply_rule(claim, median), ""
    if span[0] <= rule["value"] <= span[1]:  # as evaluate: only a span across the threshold is decided again
        got, why = _decide_threshold(rule, median, span, got, "")
    assert got == verdict
    if got == "contradicted" and span[0] <= 0 <= span[1]:
        assert "negligible margin of 3 points" in why
    if got == "inconclusive" and "negligible" in rule:
        assert "more than 3 points onto the claim's side" in why


@pytest.mark.parametrize(
    ("rule", "span", "said"),
    [
        ({"type": "less_than", "value": 0, "decisive": True, "negligible": 3}, (-2.1, -1.4), True),
        ({"type": "less_than", "value": 0, "decisive": True, "negligible": 3}, (-4.0, -1.4), False),
        ({"type": "greater_than", "value": 0, "decisive": True, "negligible": 3}, (0.5, 2.0), True),
        ({"type": "less_than", "value": 0, "decisive": True}, (-2.1, -1.4), False),
    ],
)
def test_a_reproduced_threshold_claim_says_when_its_effect_is_smaller_than_the_margin(rule, span, said):
    """A span wholly on the claim's side reproduces it; where the whole span stays within the negligible margin,
    the reason says the effect is there but smaller than the margin."""
    note = _below_margin(rule, span)
    assert bool(note) is said
    if said:
        assert "smaller than the registry's negligible margin of 3 points" in note
        assert f"{span[0]:.1f}% to {span[1]:.1f}%" in note


def test_spread_claims_have_no_direction():
    claim = {
        "id": "x",
        "claimed": {"value": 0.4, "unit": "pct"},
        "rule": {"type": "within", "tolerance": 0.3},
        "measure": {"kind": "metric"},
    }
    assert apply_rule(claim, 20.6) == "contradicted"


def test_claims_about_one_engine_are_judged_on_that_engines_jobs_only():
    # The committed two-engine H200 study: SGLang lists adapters by their own names (requests select them as
    # BASE:ADAPTER), loads adapters faster than vLLM, and its first server was the slowest to get ready.
    study = STUDIES / "h200-1.7b"
    two = Context(
        read_json(study / "summary" / "summary.json"),
        read_json(study / "model" / "manifest.json"),
        [read_json(study / "adapters" / f"{a}.json") for a in "abc"],
        read_json(ROOT / "config" / "models" / "qwen3-1.7b.json"),
    )
    ids = ("op-models-listed", "s5-runtime-load-time", "s5-readiness-lora-slower", "s3rep-first-run-warmup")
    got = {r.id: r for r in evaluate([c for c in load_claims(ROOT / "config" / "claims.yaml") if c["id"] in ids], two)}
    listed = got["op-models-listed"]
    assert listed.verdict == "reproduced"
    assert listed.evidence == ["server:vllm-lora-2", "server:vllm-lora-4", "server:vllm-lora-off"]
    vllm_load = next(r for r in two.runtime_all if r["engine"] == "vllm")
    assert got["s5-runtime-load-time"].measured == vllm_load["load_s_median"]
    assert "off 116.2 s" in got["s5-readiness-lora-slower"].why  # vllm-lora-off's, not SGLang's (156.8 s)
    assert all(e.startswith("vllm-") for e in got["s3rep-first-run-warmup"].evidence)
    # SGLang's own listing holds too: every adapter under its own name, and the base model
    sgl = two.raw_facts["sglang-lora-4"]
    assert sgl["probes"]["models_listed"] == ["a", "b", "c", "qwen3-1.7b-synthetic"]
    assert models_listed_ok(sgl["probes"], sgl["config"]["adapters"]) is True
    assert models_listed_ok({"models_listed": ["qwen3-1.7b-synthetic"]}, ["a"]) is False


def test_vllms_own_rank_8_benchmark_is_judged_across_its_two_servers():
    """ext-vllm-pr11267-7b-rank8 on a Llama-2-7B run on a GPU: the rank-8 server's adapter at its largest burst
    against the LoRA-off server's base model there (two servers: the span is what their intervals allow)."""

    def row(server: str, lora: bool, rank: int | None, cond: str, burst: int, tok_s: float) -> dict:
        return {"server": server, "engine": "vllm", "lora": lora, "max_loras": 1 if lora else None,
                "max_lora_rank": rank, "condition": cond, "adapters": cond, "burst": burst, "status": "ok",
                "throughput_median": tok_s, "throughput_ci_lo": 0.99 * tok_s,
                "throughput_ci_hi": 1.01 * tok_s}  # fmt: skip

    rows = [row("vllm-lora-off", False, None, "base", 3, 300.0), row("vllm-lora-off", False, None, "base", 48, 4000.0),
            row("vllm-lora-1-r8", True, 8, "base", 48, 3700.0), row("vllm-lora-1-r8", True, 8, "r8", 48, 2700.0),
            row("vllm-lora-1", True, 16, "a", 48, 2600.0)]  # fmt: skip
    ctx = Context({"rows": rows, "facts": []}, {"parameters": 6_738_415_616}, [], None, None)
    ctx.hardware, ctx.model_params = "gpu", 6_738_415_616
    claims = [c for c in load_claims(ROOT / "config" / "claims.yaml") if c["id"] == "ext-vllm-pr11267-7b-rank8"]
    (v,) = evaluate(claims, ctx)
    assert v.evidence == ["vllm-lora-1-r8/r8/48", "vllm-lora-off/base/48"]
    assert v.measured == pytest.approx(100 * (2700 / 4000 - 1))  # -32.5 %, within 3 points of -33.6
    assert v.verdict == "reproduced" and v.source == "vllm-project/vllm#11267"
    assert "different machines" not in v.why

    # the two servers' jobs on two machines (a study put together from two loans): the verdict says so
    def on(off_boot: str, r8_boot: str) -> list[dict]:
        return [{"server": "vllm-lora-off", "boot_id": off_boot}, {"server": "vllm-lora-1-r8", "boot_id": r8_boot}]

    ctx.facts = on("546fe40c", "0724519f")
    (v,) = evaluate(claims, ctx)
    assert "vllm-lora-1-r8 and vllm-lora-off ran on different machines, which the span does not cover" in v.why
    ctx.facts = on("546fe40c", "546fe40c")
    assert "different machines" not in evaluate(claims, ctx)[0].why
    # a loose selector (any LoRA server's base requests) takes a server on the other cell's machine first
    lora_on = [c for c in load_claims(ROOT / "config" / "claims.yaml") if c["id"] == "s3-b48-base-lora-on"]
    ctx.facts = [*on("546fe40c", "0724519f"), {"server": "vllm-lora-1", "boot_id": "546fe40c"}]
    rows.append(row("vllm-lora-1", True, 16, "base", 48, 3900.0))
    (v,) = evaluate(lora_on, ctx)
    assert v.evidence == ["vllm-lora-1/base/48", "vllm-lora-off/base/48"] and "different machines" not in v.why
    # none on the LoRA-off server's machine: the fewest slots, then the id, as without records; the why says so
    ctx.facts = [*on("546fe40c", "0724519f"), {"server": "vllm-lora-1", "boot_id": "d9411db0"}]
    (v,) = evaluate(lora_on, ctx)
    assert v.evidence == ["vllm-lora-1/base/48", "vllm-lora-off/base/48"] and "different machines" in v.why


@pytest.mark.parametrize(
    ("n32_ttft", "verdict"),
    [((900, 1100, 1000, 950, 1050, 1000, 980), "reproduced"), ((300, 200, 250, 260, 240, 250, 255), "contradicted"),
     ((100, 2000, 150, 1800, 120, 1900, 1000), "inconclusive")],
)  # fmt: skip
def test_sglangs_slot_cliff_in_ttft_is_judged_on_the_ratio_paired_per_cycle(n32_ttft, verdict):
    """ext-sglang-pr13349-slot-cliff-ttft: 32 adapters against 8 on SGLang's 8 slots, median TTFT paired per
    cycle (n8 at 50 ms): ten times or more decides it, a span across x10 leaves it open."""

    def row(cond: str, ttfts: tuple[float, ...]) -> dict:
        return {"server": "sglang-ml8", "engine": "sglang", "lora": True, "max_loras": 8, "condition": cond,
                "adapters": cond, "burst": 48, "status": "ok", "throughput_median": 1000.0,
                "ttft_median_ms": sorted(ttfts)[len(ttfts) // 2],
                "ttft_by_cycle": " ".join(f"0.{c}:{t}" for c, t in enumerate(ttfts))}  # fmt: skip

    rows = [row("n8-uniform", (50,) * len(n32_ttft)), row("n32-uniform", n32_ttft)]
    ctx = Context({"rows": rows, "facts": []}, {"parameters": 8_190_735_360}, [], None, None)
    ctx.hardware = "gpu"
    claims = [
        c for c in load_claims(ROOT / "config" / "claims.yaml") if c["id"] == "ext-sglang-pr13349-slot-cliff-ttft"
    ]
    (v,) = evaluate(claims, ctx)
    assert v.evidence == ["sglang-ml8/n32-uniform/48", "sglang-ml8/n8-uniform/48"]
    assert v.verdict == verdict, v.why
    assert "7 pairs of measurements taken close together" in v.why


def test_a_ratio_verdict_carries_the_span_it_was_tested_against():
    # vLLM PR #11267's one rank-8 adapter on the H200 (studies/llama2-7b-rank16-h200): across two servers, so the
    # span is what the two cells' intervals allow; the report shows it beside the figure
    study = STUDIES / "llama2-7b-rank16-h200"
    ctx7b = Context(
        read_json(study / "summary" / "summary.json"),
        read_json(study / "model" / "manifest.json"),
        [read_json(study / "adapters" / "r8.json")],
        read_json(ROOT / "config" / "models" / "qwen3-1.7b.json"),
    )
    claims = [c for c in load_claims(ROOT / "config" / "claims.yaml") if c["id"] == "ext-vllm-pr11267-7b-rank8"]
    (v,) = evaluate(claims, ctx7b)
    assert v.verdict == "direction only" and v.span is not None
    lo, hi = v.span
    assert lo < v.measured < hi and hi < 0 and not lo <= claims[0]["claimed"]["value"] <= hi
    assert Verdict.from_json(v.to_json()).to_json() == v.to_json()
    assert v.to_json()["span"] == [round(lo, 2), round(hi, 2)]
    # a verdict without a figure has no span, and its record no key for one
    not_run = Verdict.from_json({**v.to_json(), "measured": None, "verdict": "not run", "span": None})
    assert "span" not in not_run.to_json()


def test_a_server_fact_over_servers_of_whole_numbers_reads_as_a_whole_number():
    """GPU memory of two LoRA servers: the median of 100 and 104 MiB is 102, not 102.0; of 100 and 101 it is
    100.5."""
    claims = [c for c in load_claims(ROOT / "config" / "claims.yaml") if c["id"] == "s4-gpu-mem-lora-on"]

    def fact(server: str, mib: int) -> dict:
        return {"server": server, "engine": "vllm", "lora": True, "status": "ok", "gpu_mem_ready_mib": mib}

    for mibs, text in (((100, 104), "102"), ((100, 101), "100.5")):
        ctx = Context({"rows": [], "facts": [fact("a", mibs[0]), fact("b", mibs[1])]}, {"parameters": 1}, [], None)
        ctx.hardware = "gpu"
        (v,) = evaluate(claims, ctx)
        assert v.measured_text == text and "median over 2 server(s)" in v.why, (v.measured_text, v.why)
