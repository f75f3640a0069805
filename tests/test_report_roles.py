"""Study vocabulary from config, never from code: the findings pick their conditions by role (roles.py), their
claims from the registry's ``finding`` links, the roofline its GPU figures from config/hardware.yaml."""

from __future__ import annotations

import copy

import pytest
import yaml

from lorabench.claims import evaluate, finding_links, load_claims
from lorabench.config import ConfigError, load_and_check
from lorabench.io import read_json
from lorabench.report import environment
from lorabench.report_model import _engine_rows, findings, gpu_bandwidths, rank_rows, roofline
from lorabench.roles import condition_roles, derived_role, role_conditions

from .conftest import FIXTURES, ROOT, STUDIES

RUN = FIXTURES / "cpu-run"
DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
RENAME = {"base": "plain", "a": "solo", "ab": "duo", "ab-base": "duo-plain", "abc": "trio"}
LINKS = finding_links(load_claims(ROOT / "config" / "claims.yaml"))


def renamed(cfg: dict) -> dict:
    """The default study with every condition renamed (RENAME), nothing else changed."""
    cfg = copy.deepcopy(cfg)
    cfg["conditions"] = {RENAME[k]: v for k, v in cfg["conditions"].items()}
    for s in cfg["servers"].values():
        s["conditions"] = [RENAME[c] for c in s["conditions"]]
    cfg["baseline"]["condition"] = RENAME[cfg["baseline"]["condition"]]
    return cfg


def fixture_findings(cfg: dict, rename: dict[str, str] | None = None) -> list[dict]:
    summary = read_json(RUN / "summary.json")
    rows = summary["rows"]
    for r in rows:
        r["condition"] = (rename or {}).get(r["condition"], r["condition"])
    return findings(rows, summary["runtime"], [], [], summary["facts"], [], config=cfg, links=LINKS)


def test_default_roles_are_derived_from_adapters_and_slots():
    assert condition_roles(DEFAULT) == {
        "base": "base",
        "a": "one-adapter",
        "ab": "other",  # two adapters, two slots at the fewest: enough
        "ab-base": "other",  # a mix with the base model
        "abc": "over-slots",  # three adapters, two slots on lora-2 and sglang-lora-2
    }
    assert role_conditions(DEFAULT) == {"base": "base", "one-adapter": "a", "over-slots": "abc"}


def test_over_slots_counts_the_slots_of_the_servers_measuring_the_condition():
    cfg = copy.deepcopy(DEFAULT)
    for s in cfg["servers"].values():
        if s.get("max_loras") == 2:
            s["conditions"] = [c for c in s["conditions"] if c != "abc"]
    assert derived_role(cfg, "abc") == "other"  # only lora-4 (4 slots) measures it
    cfg["conditions"]["fam"] = {"family": {"name": "m", "count": 8}}
    cfg["servers"]["lora-4"]["conditions"].append("fam")
    assert derived_role(cfg, "fam") == "over-slots"  # 8 family members on 4 slots


def test_findings_of_a_study_with_other_condition_names():
    """The must-show of issue 27: conditions named plain, solo, duo, duo-plain, trio (no base, a or abc) get the
    same findings as the default study's, on the same rows, naming their own conditions."""
    before = {f["key"]: f for f in fixture_findings(DEFAULT)}
    after = {f["key"]: f for f in fixture_findings(renamed(DEFAULT), RENAME)}
    assert {"enable", "adapter", "slots", "runtime"} <= set(after)
    assert set(after) == set(before)
    assert after["adapter"]["answer"] == before["adapter"]["answer"].replace(
        "adapter a vs base", "adapter solo vs plain"
    )
    assert after["slots"]["answer"] == before["slots"]["answer"].replace("(abc)", "(trio)")
    assert after["enable"]["answer"] == before["enable"]["answer"]
    assert after["adapter"]["answer"].startswith("adapter solo vs plain on lora-2: burst 4: ")
    assert after["slots"]["answer"].startswith("three adapters (trio) on 2")
    for key in ("enable", "adapter", "slots", "runtime"):
        assert after[key]["claims"] == before[key]["claims"] == LINKS[key]


def test_a_role_set_in_the_config_picks_the_condition():
    """Two one-adapter conditions: the one whose role the config sets answers, not the first by name; a condition
    set to other answers nothing."""
    cfg = renamed(DEFAULT)
    cfg["conditions"]["duo"]["role"] = "over-slots"  # two adapters: over the slots only by the config's word
    cfg["conditions"]["trio"]["role"] = "other"
    assert role_conditions(cfg) == {"base": "plain", "one-adapter": "solo", "over-slots": "duo"}
    found = {f["key"]: f for f in fixture_findings(cfg, RENAME)}
    assert found["slots"]["answer"].startswith("two adapters (duo) on 2")
    cfg["conditions"]["solo"]["role"] = "other"
    cfg["conditions"]["plain"]["role"] = "other"
    assert {"enable", "adapter"}.isdisjoint(f["key"] for f in fixture_findings(cfg, RENAME))


def test_the_one_adapter_finding_takes_both_cells_from_one_server():
    """The Punica layout (punica-cpu, llama2-7b-rank16): the one-adapter condition only on the 32-slot server, a
    1-slot server measuring base and another adapter. The finding compares the adapter with base on the 32-slot
    server, paired per cycle, never with the 1-slot server's base cells."""

    def row(server: str, slots: int, cond: str, tput: float) -> dict:
        cycles = " ".join(f"0.{c}:{tput * (1 + 0.01 * (c % 3))}" for c in range(6))
        return {"server": server, "engine": "vllm", "lora": True, "max_loras": slots, "condition": cond, "burst": 8,
                "status": "ok", "throughput_median": tput, "throughput_ci_lo": tput * 0.99,
                "throughput_ci_hi": tput * 1.03, "throughput_by_cycle": cycles}  # fmt: skip

    cfg = {
        "conditions": {
            "base": {"adapters": ["base"]},
            "identical": {"adapters": ["p-000"]},
            "r8": {"adapters": ["r8"]},
        },
        "servers": {
            "lora-1-r8": {"lora": True, "max_loras": 1, "conditions": ["base", "r8"]},
            "lora-32": {"lora": True, "max_loras": 32, "conditions": ["base", "identical"]},
        },
    }
    rows = [row("lora-1-r8", 1, "base", 2000.0), row("lora-1-r8", 1, "r8", 1000.0),
            row("lora-32", 32, "base", 1800.0), row("lora-32", 32, "identical", 900.0)]  # fmt: skip
    found = {f["key"]: f for f in findings(rows, [], [], [], [], [], config=cfg, links=LINKS)}
    assert found["adapter"]["answer"].startswith("adapter identical vs base on lora-32: burst 8: -50.0%")


def test_without_a_config_no_condition_finding():
    assert {"enable", "adapter", "slots"}.isdisjoint(f["key"] for f in fixture_findings({}))


def test_unknown_role_is_a_schema_error_naming_the_key(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)
    cfg = renamed(DEFAULT)
    cfg["conditions"]["solo"]["role"] = "single"
    with pytest.raises(ConfigError, match=r"conditions\.solo\.role: 'single' is not one of"):
        load_and_check(cfg)
    cfg["conditions"]["solo"]["role"] = "one-adapter"
    ok = load_and_check(cfg)
    # the reference files are config keys whose defaults the schema fills
    assert ok["reference_architecture"] == "config/models/qwen3-1.7b.json"
    assert ok["hardware_specs"] == "config/hardware.yaml"


def test_finding_links_come_from_the_claims_registry(tmp_path):
    claims = load_claims(ROOT / "config" / "claims.yaml")
    assert LINKS["enable"] == ["s6-lora-enabled-free", "s7-lora-enabled-free"]
    assert LINKS["slots"] == ["s41-sgl-slot-cliff", "s6-slot-shortage-half", "s7-slot-shortage-56pct"]
    # every link names a finding the report makes
    assert set(LINKS) == {"enable", "adapter", "slots", "runtime", "prefix"}
    # a claim moved to another finding in the registry moves in the report; verdicts carry the link
    moved = copy.deepcopy(claims)
    next(c for c in moved if c["id"] == "s6-lora-enabled-free")["finding"] = "adapter"
    from lorabench.claims import Context

    ctx = Context(read_json(RUN / "summary.json"), read_json(RUN / "model.json"), [])
    verdicts = evaluate(moved, ctx)
    links = finding_links(verdicts)
    assert links["enable"] == ["s7-lora-enabled-free"]
    assert links["adapter"] == ["s6-adapter-cost-range", "s6-lora-enabled-free", "s7-adapter-cost-b48"]
    summary = read_json(RUN / "summary.json")
    found = {f["key"]: f for f in findings(summary["rows"], [], [], [], [], [], config=DEFAULT, links=links)}
    assert found["enable"]["claims"] == ["s7-lora-enabled-free"]
    bad = tmp_path / "claims.yaml"
    bad.write_text(yaml.safe_dump({"claims": [{**claims[0], "finding": ["enable"]}]}))
    with pytest.raises(ValueError, match="finding must be the key of a report finding"):
        load_claims(bad)


def test_roofline_takes_its_gpu_figures_from_the_hardware_file(tmp_path):
    bw = gpu_bandwidths(ROOT / "config" / "hardware.yaml")
    assert dict(bw)["H200"] == 4.8e12
    model = {"parameters": 1_000_000_000, "dtype": "bfloat16"}
    rows = [{"server": s, "burst": 4, "throughput_median": 100.0} for s in ("x", "y", "z")]
    facts = [{"server": "x", "device": "NVIDIA A100-SXM4-80GB"}, {"server": "y", "device": "NVIDIA A10"},
             {"server": "z", "device": "cpu"}]  # fmt: skip
    roofline(rows, facts, model, bw)
    assert rows[0]["roofline_tok_s"] == 4 * 2.0e12 / 2e9  # A100, not A10 (listed first)
    assert rows[1]["roofline_tok_s"] == 4 * 0.6e12 / 2e9
    assert "roofline_tok_s" not in rows[2]
    other = tmp_path / "hw.yaml"
    other.write_text("gpus:\n  - {match: A10, memory_bandwidth_gb_s: 1000}\n")
    rows = [{"server": "y", "burst": 1}]
    roofline(rows, facts, model, gpu_bandwidths(other))
    assert rows[0]["roofline_tok_s"] == 1e12 / 2e9
    other.write_text("gpus:\n  - {match: A10, memory_bandwidth_gb_s: fast}\n")
    with pytest.raises(ValueError, match=r"gpus\[0\]\.memory_bandwidth_gb_s"):
        gpu_bandwidths(other)


def test_rank_costs_are_taken_against_the_base_condition_by_its_role():
    from .test_ranks import ADAPTERS, _rows

    rows = [{**r, "condition": "plain" if r["condition"] == "base" else r["condition"]} for r in _rows(700)]
    cost = {(r["server"], r["condition"]): r for r in rank_rows(rows, ADAPTERS, "plain")["cost"]}
    assert cost[("rank64", "r64")]["pct"] == pytest.approx(-30.0)


def test_a_condition_of_another_workload_takes_no_role_unless_given_one():
    config = {
        "servers": {"s": {"lora": True, "max_loras": 2, "conditions": ["base", "a", "long-a", "long-base"]}},
        "conditions": {
            "base": {"adapters": ["base"]},
            "a": {"adapters": ["a"]},
            "long-base": {"adapters": ["base"], "workload": "long"},
            "long-a": {"adapters": ["a"], "workload": "long"},
        },
    }
    roles = condition_roles(config)
    assert (roles["long-a"], roles["long-base"], roles["a"]) == ("other", "other", "one-adapter")
    assert role_conditions(config) == {"base": "base", "one-adapter": "a"}
    config["conditions"]["long-a"]["role"] = "one-adapter"
    assert role_conditions(config)["one-adapter"] == "long-a"


def test_a_finding_about_one_engine_carries_only_the_claims_about_that_engine_or_none():
    # the committed H200 study: both engines enable LoRA; the source's "enabling LoRA is free" claims are about
    # vLLM and judged on its servers, so SGLang's answer (-12 to -13 %) must not show them as reproduced
    from lorabench.claims import claim_engines
    from lorabench.config import load_file

    study = STUDIES / "h200-8b"
    summary, verdicts = read_json(study / "summary/summary.json"), read_json(study / "claims/verdicts.json")
    cfg = load_file(str(ROOT / "config" / "gpu-h200-8b.yaml"))
    engines = claim_engines(verdicts["claims"])
    assert engines["s6-lora-enabled-free"] == "vllm" and engines["s41-sgl-slot-cliff"] == "sglang"
    found = findings(summary["rows"], summary["runtime"], [], [], summary["facts"], [], config=cfg,
                     links=finding_links(verdicts["claims"]), claim_engines=engines)  # fmt: skip
    by = {(f.get("engine"), f["key"]): f["claims"] for f in found}
    assert by[("vllm", "enable")] == ["s6-lora-enabled-free", "s7-lora-enabled-free"]
    assert by[("sglang", "enable")] == []
    assert by[("sglang", "slots")] == ["s41-sgl-slot-cliff"]
    assert "s41-sgl-slot-cliff" not in by[("vllm", "slots")] and "s6-slot-shortage-half" in by[("vllm", "slots")]
    # the runtime-loading claims are about vLLM: SGLang's runtime job answers without them
    assert all(c not in by[("sglang", "runtime")] for c in ("s5-runtime-load-time", "s7-adapter-deploy-seconds"))
    # a claim that names no engine stays on every engine's finding
    anyone = {**engines, "s6-lora-enabled-free": None}
    found = findings(summary["rows"], [], [], [], [], [], config=cfg, links=finding_links(verdicts["claims"]),
                     claim_engines=anyone)  # fmt: skip
    assert [f["claims"] for f in found if f["key"] == "enable" and f["engine"] == "sglang"] == [
        ["s6-lora-enabled-free"]
    ]


def test_a_side_job_claim_naming_no_engine_stays_with_the_first_job_that_ran():
    # SGLang's runtime-loading job of the committed H200 study, then the same figures as if two vLLM jobs had run
    sglang = next(
        r
        for r in read_json(STUDIES / "h200-8b/summary/summary.json")["runtime"]
        if r["status"] == "ok" and r["engine"] == "sglang"
    )
    jobs = [sglang, {**sglang, "engine": "vllm"}, {**sglang, "engine": "vllm"}]
    links = {"runtime": ["about-vllm", "about-none"]}
    engines = {"about-vllm": "vllm", "about-none": None}
    found = findings([], jobs, [], links=links, claim_engines=engines)
    assert [(f["key"], f["engine"], f["claims"]) for f in found] == [
        ("runtime", "sglang", ["about-none"]), ("runtime", "vllm", ["about-vllm"]), ("runtime-more", "vllm", [])
    ]  # fmt: skip


def test_a_comparison_of_two_servers_that_ran_on_different_machines_says_so():
    """The enable and slots findings compare two server jobs: where their facts record different boot ids (a
    study put together from several runs), the answer says the intervals do not cover it; where they record the
    same one, or none (facts before the record), the answer is as before."""
    summary = read_json(RUN / "summary.json")
    plain = {f["key"]: f for f in findings(summary["rows"], [], [], [], summary["facts"], [], config=DEFAULT)}
    facts = [{**f, "boot_id": "same"} for f in summary["facts"]]
    same = {f["key"]: f for f in findings(summary["rows"], [], [], [], facts, [], config=DEFAULT)}
    assert same["enable"]["answer"] == plain["enable"]["answer"]
    assert "different machines" not in plain["enable"]["answer"]
    facts = [{**f, "boot_id": "other" if f["server"] == "lora-off" else "same"} for f in summary["facts"]]
    apart = {f["key"]: f for f in findings(summary["rows"], [], [], [], facts, [], config=DEFAULT)}
    assert apart["enable"]["answer"].endswith(
        "lora-2 and lora-off ran on different machines, which the intervals do not cover: not a comparison on one "
        "machine"
    )
    assert apart["slots"]["answer"] == plain["slots"]["answer"]  # lora-2 and lora-4: one machine
    # a LoRA server on the LoRA-off server's machine is taken before the one of fewest slots elsewhere
    assert plain["enable"]["answer"].startswith("base-model requests on lora-2 vs lora-off")
    facts = [{**f, "boot_id": "other" if f["server"] == "lora-2" else "same"} for f in summary["facts"]]
    near = {f["key"]: f for f in findings(summary["rows"], [], [], [], facts, [], config=DEFAULT)}
    assert near["enable"]["answer"].startswith("base-model requests on lora-4 vs lora-off")
    assert "different machines" not in near["enable"]["answer"]


def test_the_engine_comparison_counts_rows_of_servers_on_different_machines():
    summary = read_json(RUN / "summary.json")
    row = {"a_engine": "vllm", "a_server": "lora-2", "b_engine": "sglang", "b_server": "sglang-lora-2",
           "ratio_pct": -5.0, "ratio_lo_pct": -9.0, "ratio_hi_pct": -1.0}  # fmt: skip
    facts = [*summary["facts"], {"server": "sglang-lora-2", "boot_id": "b"}]
    facts = [{**f, "boot_id": f.get("boot_id") or "a"} for f in facts]
    (eng,) = [f for f in findings(summary["rows"], [], [row], [], facts, [], config=DEFAULT) if f["key"] == "engines"]
    assert eng["answer"] == (
        "1 of 1 rows (servers of one setting on each engine, not paired) differ beyond the spread; median ratio "
        "-5.0%; 1 of 1 compare servers that ran on different machines, which no interval here covers"
    )


def test_the_engine_comparison_table_names_its_servers_and_marks_rows_of_two_machines():
    row = {"lora": True, "slots": 1, "max_lora_rank": 8, "condition": "r8", "burst": 18,
           "a_engine": "sglang", "a_server": "sglang-rank8", "a_tok_s": 1288.0, "a_spread_pct": 1.3, "a_ci_pct": 0.5,
           "b_engine": "vllm", "b_server": "vllm-rank8", "b_tok_s": 1801.0, "b_spread_pct": 6.3, "b_ci_pct": 1.9,
           "ratio_pct": 39.8, "ratio_lo_pct": 36.6, "ratio_hi_pct": 42.7}  # fmt: skip
    facts = [{"server": "sglang-rank8", "boot_id": "a"}, {"server": "vllm-rank8", "boot_id": "b"}]
    (apart,) = _engine_rows({"engine_comparison": [row], "facts": facts})
    (together,) = _engine_rows({"engine_comparison": [row], "facts": [{**f, "boot_id": "a"} for f in facts]})
    assert apart["apart"] and not together["apart"]
    section = environment(ROOT / "report" / "templates").get_template("sections/engines.html.j2")
    html = section.render(engine_comparison=[apart], facts=[])
    assert 'sglang-rank8, vllm-rank8 <span class="muted">(two machines)</span>' in html
    assert "1,288 (0.5)" in html and "1,801 (1.9)" in html  # each side's 95 % interval, not its spread
    assert "(two machines)" not in section.render(engine_comparison=[together], facts=[])
    # a LoRA-off pair has no max_lora_rank (EngineComparison.to_json leaves it out): a dash, not an error
    off = {k: v for k, v in together.items() if k != "max_lora_rank"} | {"lora": False, "condition": "base"}
    assert "<td>off</td><td>1</td><td>-</td>" in section.render(engine_comparison=[off], facts=[])


def test_a_host_cache_smaller_than_the_adapters_in_use_is_a_finding_of_its_engine():
    """Two LoRA servers alike but for vLLM's max_cpu_loras: each condition both measured whose adapters outnumber
    the smaller cache is compared (medians of two jobs); a condition that fits the smaller cache, and an engine
    without the setting, give none."""

    def row(server: str, cache: float | None, cond: str, tput: float, engine: str = "vllm") -> dict:
        return {"server": server, "engine": engine, "lora": True, "max_loras": 8, "max_lora_rank": 8,
                "max_cpu_loras": cache, "condition": cond, "burst": 48, "status": "ok", "throughput_median": tput,
                "throughput_ci_lo": tput * 0.99, "throughput_ci_hi": tput * 1.01}  # fmt: skip

    cfg = {
        "conditions": {
            "base": {"adapters": ["base"]},
            "n4": {"adapters": [f"m-{i}" for i in range(4)], "assignment": "uniform"},
            "n16": {"adapters": [f"m-{i}" for i in range(16)], "assignment": "uniform"},
        },
        "servers": {},
    }
    rows = [row("c8", 8.0, "base", 6000.0), row("c8", 8.0, "n4", 2000.0), row("c8", 8.0, "n16", 900.0),
            row("c16", 16.0, "base", 6000.0), row("c16", 16.0, "n4", 2000.0), row("c16", 16.0, "n16", 1000.0),
            row("s8", None, "n16", 500.0, "sglang")]  # fmt: skip
    facts = [{"server": s, "boot_id": "one"} for s in ("c8", "c16", "s8")]
    found = [f for f in findings(rows, [], [], [], facts, [], config=cfg) if f["key"] == "cache"]
    assert [f["engine"] for f in found] == ["vllm"]
    answer = found[0]["answer"]
    assert answer.startswith("host cache of 8 vs 16 adapters on 8 slots (c8 vs c16: two server jobs")
    assert "n16 at burst 48: -10.0% [-11.8, -8.2]" in answer and "n4 " not in answer
    assert answer.endswith("(a difference beyond our spread in each)")
    facts[0]["boot_id"] = "other"
    apart = [f for f in findings(rows, [], [], [], facts, [], config=cfg) if f["key"] == "cache"][0]["answer"]
    assert apart.endswith("c8 and c16 ran on different machines, which the intervals do not cover: not a comparison "
                          "on one machine")  # fmt: skip
