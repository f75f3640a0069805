"""Aggregation on recorded real measurements (tests/fixtures/cpu-run)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from lorabench.io import read_json, read_jsonl
from lorabench.loadgen.client import RequestRecord
from lorabench.measure.burst import measurement_row
from lorabench.summary import aggregate, engine_comparison, summarize_cell

from .conftest import FIXTURES, STUDIES

RUN = FIXTURES / "cpu-run"


def test_cell_statistics_match_the_recorded_measurements():
    ms = pd.DataFrame(list(read_jsonl(RUN / "measurements-lora-2.jsonl")))
    cell = ms[(ms["condition"] == "abc") & (ms["burst"] == 8) & (~ms["warmup"])]
    row = summarize_cell(cell.assign(n_errors=cell["n_errors"])).to_json()
    vals = sorted(cell["throughput_tok_s"])
    assert row["throughput_n"] == 5
    assert row["throughput_min"] == vals[0] and row["throughput_max"] == vals[-1]
    assert row["throughput_median"] == vals[2]
    assert row["request_errors"] == 0 and row["measurements_with_errors"] == 0


def test_warmup_rows_are_kept_but_excluded():
    ms = list(read_jsonl(RUN / "measurements-lora-2.jsonl"))
    warm = [m for m in ms if m["warmup"]]
    assert warm and all(m["rep"] < 0 for m in warm)
    summary = read_json(RUN / "summary.json")
    row = next(r for r in summary["rows"] if (r["server"], r["condition"], r["burst"]) == ("lora-2", "a", 4))
    assert row["throughput_n"] == 5 and row["warmup_throughput"] is not None


def test_errors_are_counted_and_the_measurement_is_excluded_not_averaged():
    ms = pd.DataFrame(list(read_jsonl(RUN / "measurements-lora-2.jsonl")))
    cell = ms[(ms["condition"] == "ab") & (ms["burst"] == 4) & (~ms["warmup"])].copy()
    # Turn one real measurement into one with a failed request, as the client would report it.
    idx = cell.index[0]
    cell.loc[idx, "n_errors"] = 1
    row = summarize_cell(cell).to_json()
    assert row["measurements_with_errors"] == 1 and row["request_errors"] == 1
    assert row["throughput_n"] == 4
    assert row["values"][0] == round(float(cell.sort_values("order")["throughput_tok_s"].iloc[0]), 2)


def test_throughput_counts_completed_tokens_only():
    ok = RequestRecord("1", "a", "a", completion_tokens=32, start_s=0.0, end_s=1.0, ttft_s=0.1, latency_s=1.0)
    bad = RequestRecord(
        "2", "b", "b", completion_tokens=16, start_s=0.0, end_s=2.0, error="short completion", latency_s=2.0
    )
    row = measurement_row([ok, bad], {})
    assert row["completion_tokens"] == 32 and row["n_errors"] == 1
    assert row["throughput_tok_s"] == 16.0  # 32 tokens over the 2 s the burst took
    assert row["errors"] == ["short completion"]


def test_aggregate_computes_ratios_and_engine_baselines_from_recorded_files(tmp_path):
    # The recorded lora-2 measurements and facts, plus a LoRA-off server made of lora-2's own base rows: the
    # aggregate must compute every ratio from the files it is given.
    facts = read_json(RUN / "facts-lora-2.json")
    (tmp_path / "lora-2").mkdir()
    (tmp_path / "lora-2" / "facts.json").write_text(json.dumps(facts))
    (tmp_path / "lora-2" / "measurements.jsonl").write_text((RUN / "measurements-lora-2.jsonl").read_text())
    off = {
        **facts,
        "server": "lora-off",
        "config": {**facts["config"], "lora": False, "max_loras": None, "conditions": ["base"]},
    }
    (tmp_path / "lora-off").mkdir()
    (tmp_path / "lora-off" / "facts.json").write_text(json.dumps(off))
    base_rows = [
        {**m, "server": "lora-off"} for m in read_jsonl(RUN / "measurements-lora-2.jsonl") if m["condition"] == "base"
    ]
    (tmp_path / "lora-off" / "measurements.jsonl").write_text("".join(json.dumps(m) + "\n" for m in base_rows))
    out = {k: str(tmp_path / f"out-{k}") for k in ("measurements", "summary", "facts", "json")}
    summary = aggregate(
        [str(tmp_path / s / "measurements.jsonl") for s in ("lora-2", "lora-off")],
        [str(tmp_path / s / "facts.json") for s in ("lora-2", "lora-off")],
        [],
        [],
        {"server": "lora-off", "condition": "base"},
        read_json(RUN / "summary.json")["conditions"],
        out,
    )
    rows = {(r["server"], r["condition"], r["burst"]): r for r in summary["rows"]}
    for burst in (4, 8):
        base, same = rows[("lora-off", "base", burst)], rows[("lora-2", "base", burst)]
        assert base["ratio_to_baseline_pct"] == 0.0
        assert same["ratio_to_baseline_pct"] == pytest.approx(0.0)  # the very same measurements
        r = rows[("lora-2", "abc", burst)]
        assert r["ratio_to_baseline_pct"] == pytest.approx(
            100 * (r["throughput_median"] / base["throughput_median"] - 1)
        )
        assert r["ratio_to_engine_baseline_pct"] == pytest.approx(r["ratio_to_baseline_pct"])
        assert r["ratio_to_engine_baseline_lo"] <= r["ratio_to_engine_baseline_pct"] <= r["ratio_to_engine_baseline_hi"]
    assert Path(out["summary"]).exists() and json.loads(Path(out["json"]).read_text())["rows"]


def test_ratio_to_baseline_in_recorded_summary():
    summary = read_json(RUN / "summary.json")
    rows = {(r["server"], r["condition"], r["burst"]): r for r in summary["rows"]}
    base = rows[("lora-off", "base", 8)]
    r = rows[("lora-2", "abc", 8)]
    assert abs(r["ratio_to_baseline_pct"] - 100 * (r["throughput_median"] / base["throughput_median"] - 1)) < 1e-9
    assert json.dumps(summary)  # serialisable as written


def test_host_speed_per_server_job_against_the_baseline_job():
    from lorabench.report_model import _host_speed_answer
    from lorabench.summary import _host_speed

    fdf = pd.DataFrame({"server": ["lora-off", "lora-4"]})
    mdf = pd.DataFrame({
        "server": ["lora-off", "lora-off", "lora-4", "lora-4", "lora-4"],
        "warmup": [False, False, False, False, True],
        "m_host_cpu_probe_ms": [1.56, 1.58, 1.62, 1.64, 9.0],  # the warm-up row does not count
    })  # fmt: skip
    _host_speed(fdf, mdf, {"server": "lora-off", "condition": "base"})
    assert list(fdf["host_cpu_probe_ms"]) == pytest.approx([1.57, 1.63])
    assert fdf["host_slower_than_baseline_pct"].iloc[1] == pytest.approx(100 * (1.63 / 1.57 - 1))
    answer = _host_speed_answer(fdf.to_dict("records"))
    assert answer.startswith("; the CPU probe took 3.8 % longer during lora-4's job than during lora-off's")
    same = _host_speed_answer([{"server": "a", "host_cpu_probe_ms": 1.60}, {"server": "b", "host_cpu_probe_ms": 1.61}])
    assert "the CPU probe took the same time in every server job (within 0.6 %)" in same
    older = pd.DataFrame({"server": ["lora-off"]})
    _host_speed(older, pd.DataFrame({"server": ["lora-off"], "throughput_tok_s": [1.0]}), None)  # no probe recorded
    assert older["host_cpu_probe_ms"].isna().all()


def test_per_adapter_figures_are_named_pooled_whenever_they_were_measured():
    from lorabench.measure.measurer import per_adapter
    from lorabench.summary import pooled_names

    recs = [{"condition": "ab", "burst": 2, "adapter": "a", "ttft_s": t, "latency_s": 2 * t, "itl_s": [0.01]}
            for t in (0.1, 0.2, 0.3)]  # fmt: skip
    (row,) = per_adapter(recs)
    assert row["ttft_median_pooled_ms"] == pytest.approx(200) and "ttft_median_ms" not in row
    assert pooled_names(row) == row
    legacy = {"condition": "ab", "burst": 2, "adapter": "a", "requests": 3, "ttft_median_ms": 200.0,
              "ttft_p90_ms": 280.0, "itl_median_ms": 10.0, "latency_median_ms": 400.0,
              "latency_p90_ms": 560.0}  # fmt: skip
    assert pooled_names(legacy) == {"condition": "ab", "burst": 2, "adapter": "a", "requests": 3,
                                    "ttft_median_pooled_ms": 200.0, "ttft_p90_pooled_ms": 280.0,
                                    "itl_median_pooled_ms": 10.0, "latency_median_pooled_ms": 400.0,
                                    "latency_p90_pooled_ms": 560.0}  # fmt: skip


def test_a_comparison_whose_slow_bursts_are_those_the_gpu_waited_in_says_so(tmp_path):
    # vLLM's 4-slot server of the committed H200 study: at burst 48 its bursts' throughput follows the GPU's busy
    # share (the engine's host loop kept the GPU waiting in some bursts), at burst 3 the adapter comparisons met
    # their target
    from lorabench.stats import paced_by

    study = STUDIES / "h200-8b"
    srv = study / "servers/vllm-lora-4"
    out = {k: str(tmp_path / f"out-{k}") for k in ("measurements", "summary", "facts", "json")}
    summary = aggregate([str(srv / "measurements.jsonl")], [str(srv / "facts.json")], [], [], None,
                        read_json(study / "summary/summary.json")["conditions"], out)  # fmt: skip
    comps = {(c["condition"], c["burst"]): c for c in summary["comparisons"]}
    wide = comps[("a", 48)]
    assert not wide["within_target"] and wide["gpu_paced_r"] > 0.9
    cells = {(r["condition"], r["burst"]): r for r in summary["rows"]}
    assert cells[("a", 48)]["throughput_gpu_paced_r"] == wide["gpu_paced_r"]
    rows = [m for m in read_jsonl(srv / "measurements.jsonl") if not m["warmup"] and not m["stream"]]
    a48 = [m for m in rows if (m["condition"], m["burst"]) == ("a", 48)]
    assert wide["gpu_paced_r"] == pytest.approx(
        paced_by([m["throughput_tok_s"] for m in a48], [m["metrics"]["gpu_busy_pct"] for m in a48])
    )
    assert paced_by([1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 2.0, 3.0, 4.0, 5.0]) is None  # fewer than six bursts
    assert (
        paced_by([1, 2, 3, 4, 5, 6, 7, 8, 9], [9, 8, 7, 6, 5, 4, 3, 2, 1]) is None
    )  # faster when less busy: not paced
    assert paced_by([1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 3, 2, 5, 4, 6, 9, 7, 8]) == pytest.approx(0.9, abs=0.05)
    assert paced_by([1, 2, 3, 4, 5, 6], [3, 1, 2, 6, 4, 5]) is None  # r 0.66 of six pairs: not beyond chance


def _engine_row(engine: str, server: str, rank: int | None, tok_s: float, **kw: object) -> dict:
    return {"engine": engine, "server": server, "status": "ok", "lora": rank is not None, "max_loras": 1,
            "max_lora_rank": rank, "condition": "r8", "burst": 18, "workload": "default",
            "throughput_median": tok_s, "throughput_ci_lo": tok_s * 0.99, "throughput_ci_hi": tok_s * 1.01,
            "throughput_ci_pct": 1.0, "throughput_spread_pct": 4.0, **kw}  # fmt: skip


def test_the_engine_comparison_pairs_servers_of_one_max_rank_and_names_them():
    """Servers pair by LoRA, slots and max_lora_rank (not whichever of an engine's servers came last); where an
    engine has two servers of one setting, each pairs with the other engine's; each side carries its 95 %
    interval."""
    rows = [_engine_row("sglang", "sglang-rank8", 8, 1000.0), _engine_row("sglang", "sglang-rank64", 64, 900.0),
            _engine_row("vllm", "vllm-rank8", 8, 1500.0), _engine_row("vllm", "vllm-rank64", 64, 1800.0),
            _engine_row("vllm", "vllm-rank64b", 64, 1350.0)]  # fmt: skip
    got = [c.to_json() for c in engine_comparison(rows)]
    assert [(c["a_server"], c["b_server"], c["max_lora_rank"]) for c in got] == [
        ("sglang-rank8", "vllm-rank8", 8),
        ("sglang-rank64", "vllm-rank64", 64),
        ("sglang-rank64", "vllm-rank64b", 64),
    ]
    assert [round(c["ratio_pct"]) for c in got] == [50, 100, 50]
    assert got[0]["a_ci_pct"] == got[0]["b_ci_pct"] == 1.0


def test_servers_measured_beside_other_runs_servers_are_named_in_the_stability_finding():
    from lorabench.report_model import _shared_device_answer

    facts = [{"server": "lora-off", "device_check": float("nan")}, {"server": "lora-2", "device_check": "ignored"},
             {"server": "lora-4", "device_check": None}]  # fmt: skip
    answer = _shared_device_answer(facts)
    assert answer.startswith("; lora-2 measured beside other runs' servers") and "not figures of the engine" in answer
    assert _shared_device_answer([{"server": "lora-2"}]) == ""
