"""GPU telemetry: nvidia-smi loop lines summarised per measurement window (no GPU needed)."""

import json
from pathlib import Path

import pandas as pd

from lorabench.records import CellSummary
from lorabench.report_model import findings, stability
from lorabench.resources import GpuTelemetry, summarize_gpu_samples
from lorabench.summary import _flatten, spread_reason, summarize_cell

# Rows of the method-v1 H200 study of 2026-12-01 (studies/h200-both, since removed): one measurement was several
# bursts, so a cell's spread splits into between measurements and between bursts.
V1 = Path(__file__).parent / "fixtures" / "h200-v1"
MEASURED = V1 / "vllm-lora-2.jsonl"
SGLANG = V1 / "sglang-lora-2.jsonl"  # measured with GpuTelemetry

# The shape of `nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,
# clocks_event_reasons.active --format=csv,noheader,nounits` lines, split at commas.
LINES = ["1980, 3201, 412.31, 41, 97, 0x0000000000000000", "1755, 3201, 690.02, 44, 99, 0x0000000000000004"]


def test_window_summary_of_samples():
    got = summarize_gpu_samples([[x.strip() for x in line.split(",")] for line in LINES])
    assert got["gpu_samples"] == 2 and got["gpu_sm_mhz_min"] == 1755.0 and got["gpu_sm_mhz_mean"] == 1867.5
    assert got["gpu_temp_c_max"] == 44.0 and got["gpu_clock_reasons"] == "0x4"
    assert summarize_gpu_samples([]) == {} and summarize_gpu_samples([["[N/A]", "x"]]) == {}


def test_samples_are_picked_by_arrival_time():
    tel = GpuTelemetry()
    tel.rows = [(10.0, LINES[0].split(",")), (20.0, LINES[1].split(","))]
    assert tel.window(9.0, 11.0)["gpu_sm_mhz_mean"] == 1980.0 and tel.window(30.0, 40.0) == {}


def test_cpu_only_machine_runs_without_telemetry():
    with GpuTelemetry(device="cpu") as tel:
        assert tel.proc is None and tel.window(0, 1e12) == {}


def measured_cell(path: Path, condition: str = "a", burst: int = 48, n: int = 4) -> pd.DataFrame:
    """The first ``n`` measured rows of one cell of a committed H200 job, flattened as the summary reads them,
    slowest first."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows = [r for r in rows if not r["warmup"] and (r["condition"], r["burst"]) == (condition, burst)][:n]
    return pd.DataFrame([_flatten(r) for r in rows]).sort_values("throughput_tok_s")


def test_cell_reports_clock_and_its_correlation_with_throughput():
    # Four measured rows of a committed H200 cell, each given an SM clock that rises with its throughput.
    ms = measured_cell(MEASURED)
    ms["m_gpu_sm_mhz_mean"] = [1500.0, 1600.0, 1700.0, 1800.0]
    ms["m_gpu_power_w_mean"] = 300.0
    cell = summarize_cell(ms)
    assert CellSummary.from_json(cell.to_json()) == cell  # the row reads back as the record it was written from
    row = cell.to_json()
    assert row["gpu_sm_mhz_median"] == 1650.0 and row["gpu_sm_mhz_throughput_corr"] > 0.5
    assert summarize_cell(ms.drop(columns=["m_gpu_sm_mhz_mean"])).gpu is None


def test_a_wide_cell_says_why_from_its_own_measurements():
    # A committed SGLang cell of the H200 (14 measurements, never within ±3 %): measurements differ as a whole
    # while the bursts inside each agree, and throughput moves with the GPU's busy share.
    ms = measured_cell(SGLANG, condition="base", burst=3, n=14)
    row = summarize_cell(ms, target_pct=3.0).to_json()
    assert row["reached_target"] is False and row["spread_kind"] == "measurements"
    assert row["between_sd_pct"] > 2 * row["burst_sd_pct"] > 0
    assert row["spread_reason"].startswith("whole measurements differ (±")
    assert "throughput moves with the GPU's busy share (r = +0.9" in row["spread_reason"]
    assert row["spread_moves_with"] == "the GPU's busy share"
    # each measurement with where it was taken (server start, order), for comparisons within the job
    assert len(row["throughput_by_time"].split()) == 14 and row["throughput_by_time"].startswith("0.")
    # eight measurements: their interval is the whole range, and the reason says so
    few = summarize_cell(ms.iloc[:8], target_pct=0.5).to_json()
    assert few["spread_reason"].startswith("only 8 measurements, so the 95 % interval is their whole range")
    # a cell within its target has no reason
    assert summarize_cell(ms, target_pct=50.0).spread.reason is None


def test_a_wide_cell_names_a_front_end_that_worked_harder_in_its_slow_bursts():
    # SGLang's base-model cell of studies/many-adapters-h100 (H100, method v2, 10 cycles): two of its ten
    # non-streamed bursts ran about 20 % slow, each with the HTTP front end at 0.29-0.30 of a CPU against 0.05-0.07
    # in the others, while the GPU's busy share moved less with them.
    rows = [json.loads(line) for line in (Path(__file__).parent / "fixtures/h100-v2/sglang-ml32-base.jsonl").open()]
    ms = pd.DataFrame([_flatten(r) for r in rows if not r["warmup"]])
    row = summarize_cell(ms, target_pct=2.0).to_json()
    assert row["reached_target"] is False and row["spread_kind"] == "cycles" and row["throughput_n"] == 10
    assert row["front_end_cpu_throughput_corr"] < -0.9
    assert "; throughput moves with the HTTP front end's CPU (r = -" in row["spread_reason"]
    assert row["spread_moves_with"] == "the HTTP front end's CPU"
    assert CellSummary.from_json(row).load.front_end_cpu_corr == row["front_end_cpu_throughput_corr"]
    # a front end whose CPU rises with the tokens it passes on only kept pace: not named
    kept_pace = {**row, "front_end_cpu_throughput_corr": 0.99}
    assert "front end" not in spread_reason(kept_pace)[1] and spread_reason(kept_pace)[2] != row["spread_moves_with"]


def test_stability_finding_groups_the_cells_by_the_kind_of_spread():
    rows = [
        {"status": "ok", "reached_target": True, "target_ci_pct": 3.0, "throughput_ci_pct": 2.0},
        {"status": "ok", "reached_target": False, "target_ci_pct": 3.0, "spread_kind": "measurements",
         "between_sd_pct": 9.0, "burst_sd_pct": 1.5, "server": "s", "condition": "a", "burst": 3,
         "spread_reason": "whole measurements differ (...); throughput moves with the GPU's busy share (r = +0.90)",
         "spread_moves_with": "the GPU's busy share", "engine_top_thread_pct_min": 99.4,
         "engine_top_thread": "VLLM::EngineCor"},
        {"status": "ok", "reached_target": False, "target_ci_pct": 3.0, "spread_kind": "bursts",
         "engine_top_thread_pct_min": 40.0,
         "between_sd_pct": 4.0, "burst_sd_pct": 3.0, "spread_reason": "bursts vary inside measurements (...)"},
        {"status": "not run: needs a GPU"},
    ]  # fmt: skip
    st = stability(rows)
    assert (st["n"], st["reached"], st["target"]) == (3, 1, "±3 %")
    assert [(g["kind"], g["n"], g["moves_with"]) for g in st["groups"]] == [
        ("measurements", 1, "the GPU's busy share"),
        ("bursts", 1, None),
    ]
    answer = next(f for f in findings(rows, [], []) if f["key"] == "stability")["answer"]
    assert (
        answer.startswith(
            "1 of 3 measured cells within ±3 % (95 % interval of the median; median ±2.0 %, widest ±2.0 %)"
        )
        and "±9.0 % between measurements against ±1.5 % from bursts" in answer
    )
    # the one cell whose engine thread kept a CPU full is named as such; the other is not
    assert answer.count("the engine's busiest thread (VLLM::EngineCor) kept one CPU full in every measurement") == 1
