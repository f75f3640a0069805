"""LoRA's cost by phase: each mix's TTFT and ITL against the reference of its own workload, paired per cycle."""

from __future__ import annotations

import pytest

from lorabench.facts import ServerFacts
from lorabench.phases import phase_costs, workload_rows
from lorabench.stats import by_time

from .conftest import ROOT


def cell(cond: str, workload: str, ttft: list[float], itl: list[float]) -> dict:
    return {
        "server": "s", "engine": "vllm", "condition": cond, "burst": 4, "status": "ok", "workload": workload,
        "adapters": cond, "prompt_tokens_per_request": 1500.0 if workload == "long" else 9.0,
        "ttft_median_ms": sorted(ttft)[len(ttft) // 2], "itl_median_ms": sorted(itl)[len(itl) // 2],
        "ttft_by_cycle": by_time([(0, c, v) for c, v in enumerate(ttft)]),
        "itl_by_cycle": by_time([(0, c, v) for c, v in enumerate(itl)]),
    }  # fmt: skip


FACTS = {"s": ServerFacts("s", "vllm", None, "ok", {"conditions": ["base", "a", "base-long", "a-long"],
          "reference": "base", "references": {"base-long": "base-long", "a-long": "base-long"}})}  # fmt: skip


def test_each_mix_against_the_reference_of_its_own_workload():
    drift = [1.0, 1.3, 0.9, 1.6, 1.1, 1.2, 1.4]  # a slow spell that moves both cells of a cycle
    rows = [
        cell("base", "default", [10 * d for d in drift], [5 * d for d in drift]),
        cell("a", "default", [11 * d for d in drift], [6 * d for d in drift]),
        cell("base-long", "long", [100 * d for d in drift], [5 * d for d in drift]),
        cell("a-long", "long", [130 * d for d in drift], [5.5 * d for d in drift]),
    ]
    got = {p["condition"]: p for p in phase_costs(rows, FACTS)}
    assert got["a-long"]["reference"] == "base-long" and got["a"]["reference"] == "base"
    assert got["a-long"]["ttft_ratio_pct"] == pytest.approx(30.0)
    assert got["a-long"]["itl_ratio_pct"] == pytest.approx(10.0)
    assert got["a"]["ttft_ratio_pct"] == pytest.approx(10.0) and got["a"]["itl_ratio_pct"] == pytest.approx(20.0)
    # paired per cycle, the drift cancels: the interval is the ratio itself
    assert got["a-long"]["ttft_ratio_lo_pct"] == pytest.approx(30.0) == got["a-long"]["ttft_ratio_hi_pct"]
    assert got["base-long"]["ttft_ratio_pct"] is None  # a reference is its own row, with no ratio
    assert [p["condition"] for p in phase_costs(rows, FACTS)] == ["base", "a", "base-long", "a-long"]


def test_cells_that_do_not_pair_get_the_ratio_of_their_medians_without_an_interval():
    rows = [cell("base", "default", [10.0] * 3, [5.0] * 3), cell("a", "default", [12.0] * 3, [5.0] * 3)]
    (_, a) = phase_costs(rows, FACTS)
    assert a["ttft_ratio_pct"] == pytest.approx(20.0) and a["ttft_ratio_lo_pct"] is None  # 3 cycles: no interval


def test_workloads_are_described_for_the_report(monkeypatch: pytest.MonkeyPatch):
    import yaml

    monkeypatch.chdir(ROOT)
    cfg = yaml.safe_load((ROOT / "config/studies/prefill-decode-cpu.yaml").read_text())
    rows = [{"workload": "long-prompt", "prompt_tokens_per_request": v} for v in (1400.0, 1500.0, 1600.0)]
    got = {w["name"]: w for w in workload_rows(cfg, rows)}
    assert got["long-prompt"]["lengths"] == "prompt uniform 1024-1920 tokens, output uniform 8-16 tokens"
    assert got["long-prompt"]["conditions"] == ["a-long", "base-long"]
    assert got["long-prompt"]["prompt_tokens_per_request"] == 1500.0
    assert got["default"]["lengths"] == "one fixed prompt, output 64 tokens"
    assert got["default"]["prompt_tokens_per_request"] is None


def test_a_ratio_is_read_as_wide_or_as_no_change_only_from_its_interval():
    from lorabench.phases import reading

    assert reading(11.0, 8.7, 15.0) is None  # decides: a cost, within 10 points
    assert reading(9.2, -83.9, 20.8) == "wide"
    assert reading(1.0, -0.5, 2.0) == "includes 0"
    assert reading(20.0, None, None) is None  # no interval: nothing to read it by
