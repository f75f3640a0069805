"""Aggregation with pandas: per server x condition x burst, median [min-max], spread, n, errors, ratio to the
baseline, warm-up detection; plus the server-facts table. Writes tidy CSVs and one JSON the report reads."""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from .carry_over import warm_cold
from .engines.base import all_polling_threads, models_listed_ok, server_columns
from .facts import ServerFacts
from .groups import MEMORY_ARGS
from .io import read_json, read_jsonl, write_json
from .job import RuntimeLoad
from .loadgen.traffic import workload_of
from .phases import phase_costs
from .records import (
    LATENCY_TAILS,
    SUMMARY_SCHEMA,
    TELEMETRY,
    BurstScaling,
    CellLatency,
    CellLoad,
    CellSummary,
    CellThroughput,
    Comparison,
    EngineComparison,
    EngineSide,
    GpuState,
    RatioSpan,
    ServerComparison,
    Spread,
    Telemetry,
)
from .runtime_figures import load_result
from .stats import (
    MedianInterval,
    Summary,
    by_time,
    first_stands_out,
    outliers_below,
    paced_by,
    paired_ratios,
    ratio_span,
    reached_target,
)

log = logging.getLogger(__name__)

SERVER_KEYS = server_columns()  # the server settings shown as columns (lora, max_loras, ...)
# Columns that hold counts: pandas turns them into floats next to missing values; the JSON keeps them whole.
INT_KEYS = (
    "max_loras",
    "max_cpu_loras",
    "max_lora_rank",
    "burst",
    "cycles",
    "pairs",
    "throughput_n",
    "bursts_measured",
    "outlier_bursts",
    "measurements",
    "measurements_with_errors",
    "request_errors",
    "requests",
    "kv_cache_tokens",
    "cuda_graph_captures",
    "gpu_mem_ready_mib",
    "gpu_mem_peak_mib",
    "gpu_mem_after_stop_mib",
    "wrong_model_status",
)


# Per-adapter figures are pooled over requests; jobs measured before they were named so wrote them as cells' are.
POOLED = {f"{n}_{q}_ms": f"{n}_{q}_pooled_ms" for n, q in (("ttft", "median"), ("ttft", "p90"), ("itl", "median"),
                                                          ("latency", "median"), ("latency", "p90"))}  # fmt: skip


def pooled_names(row: dict[str, Any]) -> dict[str, Any]:
    """A per-adapter row with its pooled figures under their own names (``*_pooled_ms``), whenever it was measured."""
    return {POOLED.get(k, k): v for k, v in row.items()}


def _record(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: _clean(v) for k, v in row.items()}
    for k in INT_KEYS:
        if isinstance(out.get(k), float):
            out[k] = int(out[k])
    return out


LIST_KEYS = ("resident_inferred", "burst_adapters")  # a burst's adapter lists (slot_state), "|"-joined in tables


def _flatten(m: dict[str, Any]) -> dict[str, Any]:
    row = {k: v for k, v in m.items() if k not in ("metrics", "errors")}
    row["errors"] = " | ".join(m.get("errors") or [])
    for k in LIST_KEYS:
        if isinstance(m.get(k), list):
            row[k] = "|".join(m[k])
    if "burst_tok_s" in m:
        row["burst_tok_s"] = " ".join(f"{v:.1f}" for v in m["burst_tok_s"])
    for k, v in (m.get("metrics") or {}).items():
        row[f"m_{k}"] = ",".join(v) if isinstance(v, list) else v
    return row


def _clean(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if hasattr(v, "item"):
        return _clean(v.item())
    return v


QUEUE_COLS = ("m_running_max", "m_waiting_max", "m_deferred_max")  # neutral names (Engine.metric_names)


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df else pd.Series([float("nan")] * len(df), index=df.index, dtype=float)


FRONT_END_BOUND_CPU = 0.9  # the front end's share of one CPU at which a cell's figures measure the front end
HOST_BOUND_GPU_PCT = 75.0  # the GPU's busy share under which a cell's figures measure the host, not the GPU


def _mode_rows(ms: pd.DataFrame, streamed: bool) -> pd.DataFrame:
    """The rows of one mode (method v2 records ``stream`` per burst); rows without it count as streamed."""
    flag = ms["stream"].fillna(True).astype(bool) if "stream" in ms else pd.Series(True, index=ms.index)
    return ms[flag == streamed]


def _numeric(df: pd.DataFrame, col: str) -> pd.Series:
    """One column of the rows as numbers, the rows without one left out (indexed as ``df``)."""
    return pd.to_numeric(_col(df, col), errors="coerce").dropna()


def _median_of(df: pd.DataFrame, col: str) -> float | None:
    series = _numeric(df, col)
    return float(series.median()) if len(series) else None


def boundness(front_end_cpu: float | None, gpu_busy_pct: float | None) -> str:
    """What a set of bursts measured, where not the engine on its device: ``front-end-bound`` (the engine's HTTP
    front end kept one CPU at least 90 % busy), ``host-bound`` (the GPU was busy less than 75 % of the time), or
    empty."""
    if front_end_cpu is not None and front_end_cpu >= FRONT_END_BOUND_CPU:
        return "front-end-bound"
    if gpu_busy_pct is not None and gpu_busy_pct < HOST_BOUND_GPU_PCT:
        return "host-bound"
    return ""


@dataclass(frozen=True)
class _CellRows:
    """A cell's measured rows in time order, by what each figure is read from: throughput from the non-streamed
    bursts (the streamed ones where the study streams every burst), latencies from the streamed ones; ``clean``
    and ``lat_clean`` without errors."""

    all: pd.DataFrame
    plain: pd.DataFrame
    tp: pd.DataFrame
    lat: pd.DataFrame
    clean: pd.DataFrame
    lat_clean: pd.DataFrame

    @classmethod
    def of(cls, ms: pd.DataFrame) -> _CellRows:
        ms = ms.sort_values("order")
        plain = _mode_rows(ms, False)
        tp = plain if len(plain) else ms
        lat = _mode_rows(ms, True)
        return cls(ms, plain, tp, lat, tp[tp["n_errors"] == 0], lat[lat["n_errors"] == 0])


def _throughput(rows: _CellRows, target_pct: float | None) -> CellThroughput:
    values = list(rows.clean["throughput_tok_s"])
    iv = MedianInterval.of(values)
    total = Summary.of(list(_col(rows.clean, "throughput_total_tok_s").dropna()))
    streamed = len(rows.plain) and len(rows.lat_clean)
    return CellThroughput(
        summary=Summary.of(values),
        source="non-streamed bursts" if len(rows.plain) else "streamed bursts",
        ci_lo=iv.lo,
        ci_hi=iv.hi,
        ci_pct=iv.halfwidth_pct,
        ci_coverage=iv.coverage,
        streamed_median=float(rows.lat_clean["throughput_tok_s"].median()) if streamed else None,
        target_ci_pct=target_pct,
        reached_target=None if target_pct is None else bool(reached_target(values, target_pct, 1)),
        total_median=total.median,
        total_spread_pct=total.spread_pct,
    )


def _load(rows: _CellRows) -> CellLoad:
    fe_n, fe_s = _median_of(rows.plain, "m_front_end_cpu"), _median_of(rows.lat, "m_front_end_cpu")
    busy_n, busy_s = _median_of(rows.plain, "m_gpu_busy_pct"), _median_of(rows.lat, "m_gpu_busy_pct")
    plain = bool(len(rows.plain))
    return CellLoad(
        fe_n,
        fe_s,
        busy_n,
        busy_s,
        throughput_bound=boundness(fe_n if plain else fe_s, busy_n if plain else busy_s),
        latency_bound=boundness(fe_s, busy_s) if len(rows.lat) else "",
        gpu_paced_r=paced_by(list(rows.clean["throughput_tok_s"]), list(_col(rows.clean, "m_gpu_busy_pct")))
        if len(rows.clean)
        else None,
        front_end_cpu_corr=_throughput_corr(rows.tp, _numeric(rows.tp, "m_front_end_cpu")),
    )


def _throughput_corr(tp: pd.DataFrame, series: pd.Series) -> float | None:
    """r between the throughput rows' figures and ``series`` (a column of theirs, ``_numeric``): None with fewer
    than three values or values that never move. Rounded to 6 decimals: the last bits of pandas' sum differ
    between CPUs (its vectorised loops), and a study's tables must rebuild the same on any machine."""
    if len(series) < 3 or not series.std() > 0:
        return None
    return round(float(series.corr(tp.loc[series.index, "throughput_tok_s"])), 6)


def _latency(lat: pd.DataFrame) -> CellLatency:
    """Medians over the streamed bursts of each burst's median and percentiles."""

    def med(col: str) -> float:
        return float(_col(lat, col).median()) if len(lat) else float("nan")

    return CellLatency(
        med("ttft_median_ms"),
        med("itl_median_ms"),
        med("latency_median_ms"),
        Summary.of(list(lat["itl_median_ms"])).spread_pct,
        {k: med(k) for k in LATENCY_TAILS},
    )


def _by_cycle(df: pd.DataFrame, col: str, keep_nan: bool = False) -> str | None:
    """Each row's figure with the server start and cycle it was taken in (rows without a cycle left out, and those
    without a figure unless ``keep_nan``): two cells of a job pair bursts of one cycle (stats.ratio_span)."""
    points = [
        (int(s) if s == s else 0, int(c), float(v))
        for s, c, v in zip(_col(df, "server_start"), _col(df, "cycle"), _col(df, col), strict=True)
        if c == c and (keep_nan or v == v)
    ]
    return by_time(points) or None


def _queue_medians(tp: pd.DataFrame, warm: pd.DataFrame | None) -> dict[str, float]:
    """Queue depths come from scrapes while requests are in flight: the measurements' own when the harness scraped
    during them, else the warm-up bursts' (always scraped in flight)."""
    out = {}
    for col in QUEUE_COLS:
        series = _col(tp, col).dropna()
        if series.empty or not series.max():
            series = _col(warm, col).dropna() if warm is not None and len(warm) else series
        if len(series):
            out[col[2:]] = float(series.median())
    return out


def _gpu_state(tp: pd.DataFrame) -> GpuState | None:
    sm = _numeric(tp, "m_gpu_sm_mhz_mean")
    if not len(sm):
        return None
    power = float(_col(tp, "m_gpu_power_w_mean").dropna().median())
    return GpuState(float(sm.median()), Summary.of(list(sm)).spread_pct, power, _throughput_corr(tp, sm))


def _telemetry(tp: pd.DataFrame) -> tuple[Telemetry, ...]:
    """Does throughput move with the GPU's busy share, with time stolen by the hypervisor, with the engine's busiest
    host thread (a scheduler loop bound to one CPU), or with the load client's own CPU (a client that fills its CPU
    reads tokens late), or with the CPU probe's time (a fixed piece of work timed on the client's CPU: longer where
    the host runs slower or that CPU is busier)? (HostTelemetry, GpuTelemetry)"""
    out = []
    for name in TELEMETRY:
        col = "m_gpu_util_pct_mean" if name == "gpu_util_pct" else f"m_{name}"
        series = _numeric(tp, col)
        if len(series):
            out.append(Telemetry(name, float(series.median()), _throughput_corr(tp, series)))
    return tuple(out)


def summarize_cell(
    ms: pd.DataFrame, warm: pd.DataFrame | None = None, target_pct: float | None = None, slow_below: float = 0.75
) -> CellSummary:
    """Statistics of one server x condition x burst from its measured (non-warm-up) rows.

    Method v2: a row is one burst of one cycle. Throughput is read from the non-streamed bursts (the streamed ones
    where the study streams every burst), TTFT, ITL and latency tails from the streamed ones. The figure is the
    median over cycles, with the 95 % interval of that median and whether it reached ``target_pct``. Older
    studies' rows (a measurement of several bursts, all streamed) are read the same way."""
    rows = _CellRows.of(ms)
    ms, tp, clean = rows.all, rows.tp, rows.clean
    flag, dev = first_stands_out(list(tp["throughput_tok_s"]))
    cycles = "cycle" in ms
    # method v2: bursts below ``slow_below`` x the cell's median burst (the job's outlier_fraction)
    slow = len(outliers_below(list(clean["throughput_tok_s"]), slow_below))
    n_ok = _col(clean, "n_ok").sum()
    # an engine bound by one host thread: its busiest thread kept a CPU full in every measurement
    top_pct = _numeric(tp, "m_engine_top_thread_pct")
    top_names = _col(tp, "m_engine_top_thread").dropna()
    cell = CellSummary(
        throughput=_throughput(rows, target_pct),
        bursts_measured=int(_col(ms, "n_bursts").fillna(1).sum()),
        outlier_bursts=slow if cycles else int(_col(ms, "outlier_bursts").fillna(0).sum()),
        measured_s=float(_col(ms, "burst_s").fillna(0).sum()),
        cycles=int(pd.to_numeric(_col(clean, "cycle"), errors="coerce").nunique()) if cycles else None,
        load=_load(rows),
        latency=_latency(rows.lat_clean),
        measurements=len(tp),
        measurements_with_errors=int((ms["n_errors"] > 0).sum()),
        request_errors=int(ms["n_errors"].sum()),
        requests=int(ms["n_requests"].sum()),
        first_rep_throughput=float(tp["throughput_tok_s"].iloc[0]) if len(tp) else float("nan"),
        first_rep_deviation_pct=dev,
        first_rep_stands_out=bool(flag),
        values=[round(float(v), 2) for v in tp["throughput_tok_s"]],
        # where each was taken, so that two cells of this job compare measurement by measurement (stats.ratio_span)
        throughput_by_time=by_time(
            [
                (int(s) if s == s else 0, int(o), float(v))
                for s, o, v in zip(_col(clean, "server_start"), clean["order"], clean["throughput_tok_s"], strict=True)
            ]
        ),
        # method v2: the cycle each was taken in; per cycle, the streamed burst's median TTFT and ITL (an adapter's
        # prefill and decode cost, paired per cycle)
        throughput_by_cycle=_by_cycle(clean, "throughput_tok_s", keep_nan=True),
        ttft_by_cycle=_by_cycle(rows.lat_clean, "ttft_median_ms"),
        itl_by_cycle=_by_cycle(rows.lat_clean, "itl_median_ms"),
        # prompt tokens per request as the server's usage reported them
        prompt_tokens_per_request=float(_col(clean, "prompt_tokens").sum() / n_ok) if len(clean) and n_ok > 0 else None,
        queue_medians=_queue_medians(tp, warm),
        gpu=_gpu_state(tp),
        telemetry=_telemetry(tp),
        engine_top_thread_pct_min=float(top_pct.min()) if len(top_pct) else None,
        engine_top_thread=str(top_names.mode().iloc[0]) if len(top_names) else None,
        spread=spread_sources(clean),
    )
    if cell.throughput.reached_target is False:
        kind, reason, moves_with = spread_reason(cell.to_json())
        cell = replace(cell, spread=replace(cell.spread, kind=kind, reason=reason, moves_with=moves_with))
    return cell


# The telemetry a cell's throughput is correlated with (summarize_cell's ``NAME_throughput_corr``), as the
# reason for a wide interval names it.
TELEMETRY_NAMES = {
    "gpu_sm_mhz": "the GPU's SM clock",
    "gpu_util_pct": "the GPU's busy share",
    "host_steal_pct": "CPU time stolen from the host",
    "engine_cpus": "the engine's CPU use",
    "engine_top_thread_pct": "the engine's busiest thread",
    "engine_top_thread_preempted_per_s": "preemptions of the engine's busiest thread",
    "engine_top_thread_waits_per_s": "the engine's busiest thread waiting by itself",
    "engine_top_thread_migrations_per_s": "moves of the engine's busiest thread between CPUs",
    "engine_top_cpu_steal_pct": "CPU time stolen from the busiest engine thread's CPU",
    "client_cpu_pct": "the load client's CPU",
    "host_cpu_probe_ms": "the CPU probe's time",
    "front_end_cpu": "the HTTP front end's CPU",
}
# Series named only where they fall as throughput rises: the front end's CPU rises with the tokens it passes on, so
# a positive r says only that it kept pace; a negative one, that it worked harder in the slow bursts
FALLS_ONLY = {"front_end_cpu"}
THREAD_BOUND_PCT = 95.0  # the busiest engine thread's share of one CPU, in every measurement, that binds the engine
MIN_CORR_N = 6  # measurements before a correlation is named as a reason
WHOLE_RANGE_BELOW = 9  # with fewer values, the 95 % interval of a median is their range (stats.MedianInterval)
MIN_CORR = 0.6


def spread_sources(clean: pd.DataFrame) -> Spread:
    """Where a cell's spread comes from: how far its measurements stray from their median (``between_sd_pct``,
    the sd of the log ratio, in %) against what the bursts inside each measurement alone would move its figure
    (``burst_sd_pct``: the median over measurements of the standard error of a median burst, 1.25 sd / sqrt(n)
    of the bursts, relative to their mean). Between far above burst: whole measurements differ (slow states)."""
    vals = [float(v) for v in clean["throughput_tok_s"] if v and v > 0]
    between = burst = None
    if len(vals) >= 3:
        med = statistics.median(vals)
        between = 100 * statistics.pstdev([math.log(v / med) for v in vals])
    ses = []
    for text in _col(clean, "burst_tok_s").dropna():
        bursts = [float(x) for x in str(text).split()]
        if len(bursts) >= 2 and statistics.fmean(bursts) > 0:
            ses.append(1.25 * statistics.stdev(bursts) / statistics.fmean(bursts) / math.sqrt(len(bursts)))
    if ses:
        burst = 100 * statistics.median(ses)
    return Spread(between, burst)


def spread_reason(row: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """Why a cell's 95 % interval stayed wider than its target, from its own measurements: whole measurements
    that differ (a state lasting a measurement) or bursts that vary inside them, and the recorded telemetry that
    moves with throughput most, where one does. Returns the kind (``measurements``, ``bursts``, ``cycles``,
    ``too few``), the sentence, and that telemetry's name (None where none moves with it)."""
    between, burst = row.get("between_sd_pct"), row.get("burst_sd_pct")
    n = int(row.get("throughput_n") or 0)
    if between is None:
        return "too few", f"{n} measurement(s) without errors: too few for an interval", None
    few = f"only {n} measurements, so the 95 % interval is their whole range; " if n < WHOLE_RANGE_BELOW else ""
    if burst is not None and between > 2 * burst:
        kind = "measurements"
        why = (f"whole measurements differ (±{between:.1f} % between them; the bursts inside one explain "
               f"±{burst:.1f} %)")  # fmt: skip
    elif burst is not None:
        kind = "bursts"
        why = f"bursts vary inside measurements (±{burst:.1f} % per measurement from its bursts alone)"
    elif row.get("cycles"):
        kind = "cycles"
        why = f"bursts differ from one cycle to the next (±{between:.1f} % around their median)"
    else:
        kind = "measurements"
        why = f"measurements differ (±{between:.1f} % between them)"
    corrs = [
        (abs(c), c, label)
        for key, label in TELEMETRY_NAMES.items()
        if (c := row.get(f"{key}_throughput_corr")) is not None
        and not math.isnan(c)
        and not (key in FALLS_ONLY and c > 0)
    ]
    moves_with = None
    if corrs and n >= MIN_CORR_N:
        strength, corr, label = max(corrs)
        if strength >= MIN_CORR:
            moves_with = label
            why += f"; throughput moves with {label} (r = {corr:+.2f})"
    if thread_bound(row):
        why += (f"; the engine's busiest thread ({row.get('engine_top_thread') or 'unnamed'}) kept one CPU full in "
                f"every measurement (at least {row['engine_top_thread_pct_min']:.0f} %): an engine bound by one host "
                "thread, as fast as the CPU under it")  # fmt: skip
    return ("too few" if few and kind == "bursts" else kind), few + why, moves_with


def thread_bound(row: Mapping[str, Any]) -> bool:
    """Whether the engine's busiest thread used a whole CPU in every measurement of the cell (HostTelemetry), and
    is not a thread that spins while it waits (an engine's ``polling_threads``: SGLang's scheduler), whose full
    CPU says nothing about a bound."""
    low = row.get("engine_top_thread_pct_min")
    if row.get("engine_top_thread") in all_polling_threads():
        return False
    return low is not None and not math.isnan(low) and low >= THREAD_BOUND_PCT


def _same_workload(sdf: pd.DataFrame, ref: pd.Series) -> pd.Series:
    """The rows of ``ref``'s workload: a ratio between two workloads' cells compares different requests."""
    if "workload" not in sdf:
        return pd.Series(True, index=sdf.index)
    return sdf["workload"] == ref.get("workload")


def _engine_baselines(sdf: pd.DataFrame) -> None:
    """The cost of merely enabling LoRA, per engine: each row against the same engine's LoRA-off server, base
    model, same burst size (median ratio, and the span the two medians' 95 % intervals allow)."""
    for col in (
        "engine_baseline",
        "ratio_to_engine_baseline_pct",
        "ratio_to_engine_baseline_lo",
        "ratio_to_engine_baseline_hi",
    ):
        sdf[col] = "" if col == "engine_baseline" else float("nan")
    if not len(sdf) or "throughput_median" not in sdf:
        return
    offs = sdf[(sdf["lora"] == False) & (sdf["condition"] == "base") & (sdf["status"] == "ok")]  # noqa: E712
    for _, b in offs.iterrows():
        same = (sdf["engine"] == b["engine"]) & (sdf["burst"] == b["burst"]) & (sdf["status"] == "ok")
        same &= _same_workload(sdf, b)
        sdf.loc[same, "engine_baseline"] = f"{b['server']}/base"
        sdf.loc[same, "ratio_to_engine_baseline_pct"] = 100 * (
            sdf.loc[same, "throughput_median"] / b["throughput_median"] - 1
        )
        for i in sdf.index[same]:
            span = ratio_span(sdf.loc[i], b)
            if span:
                sdf.loc[i, "ratio_to_engine_baseline_lo"], sdf.loc[i, "ratio_to_engine_baseline_hi"] = span[1:]


def engine_comparison(rows: list[dict[str, Any]]) -> list[EngineComparison]:
    """The same server setting, condition, burst and workload on two engines side by side: B / A with the span the
    two medians' 95 % intervals allow. Servers pair by (lora, slots, max_lora_rank); where an engine has several
    servers of one setting (vLLM's host cache sizes), each of them pairs with each of the other's."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("throughput_median")]
    engines = sorted({r["engine"] for r in ok})
    if len(engines) < 2:
        return []
    a_name, b_name = engines[0], engines[1]

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        rank = r.get("max_lora_rank") if r.get("lora") else None
        rank = None if rank is None or (isinstance(rank, float) and math.isnan(rank)) else int(rank)
        return (bool(r.get("lora")), r.get("max_loras") or 0, rank or 0, r["condition"], r["burst"],
                str(r.get("workload") or ""))  # fmt: skip

    def side(x: dict[str, Any]) -> EngineSide:
        ci = x.get("throughput_ci_pct")
        return EngineSide(x["engine"], x["server"], x["throughput_median"], x.get("throughput_spread_pct"),
                          None if ci is None or math.isnan(ci) else float(ci))  # fmt: skip

    a_rows: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in ok:
        if r["engine"] == a_name:
            a_rows.setdefault(key(r), []).append(r)
    out = []
    for r in sorted((r for r in ok if r["engine"] == b_name), key=lambda r: (key(r), r["server"])):
        for a in sorted(a_rows.get(key(r), []), key=lambda x: x["server"]):
            ratio = RatioSpan.of(ratio_span(r, a)) or RatioSpan(float("nan"), float("nan"), float("nan"))
            by = "cycle (group)" if paired_ratios(r, a) else "unpaired"
            out.append(EngineComparison(key(r)[0], key(r)[1] or None, r["condition"], r["burst"], side(a), side(r),
                                        ratio, key(r)[2] or None, by))  # fmt: skip
    return out


def paired_comparisons(rows: list[dict[str, Any]], facts: Mapping[str, ServerFacts]) -> list[Comparison]:
    """Every comparison within a server job (method v2): each condition against the server's reference condition
    at the same burst size, paired per cycle (stats.ratio_span), with its interval's half-width in points and
    whether it met the job's ``target_points``. Older studies' jobs (no cycles) pair measurements by time."""
    out = []
    by_cell = {(r["server"], r["condition"], r["burst"]): r for r in rows if r.get("status") == "ok"}
    for (server, cond, burst), num in sorted(by_cell.items()):
        fact = facts.get(server)
        cfg = fact.config if fact else {}
        ref = (cfg.get("references") or {}).get(cond) or cfg.get("reference") or (cfg.get("conditions") or [None])[0]
        den = by_cell.get((server, ref, burst))
        if not ref or cond == ref or den is None:
            continue
        ratio = RatioSpan.of(ratio_span(num, den))
        if ratio is None:
            continue
        paired = bool(num.get("throughput_by_cycle") and den.get("throughput_by_cycle"))
        n = len(paired_ratios(num, den))
        out.append(
            Comparison(
                server=server, engine=num.get("engine"), burst=burst, condition=cond, reference=ref,
                workload=num.get("workload"), ratio=ratio, pairs=n,
                paired_by=("cycle" if paired else "time") if n else "unpaired",
                target_points=((fact.measurement if fact else None) or {}).get("target_points"),
                bound=num.get("throughput_bound") or den.get("throughput_bound") or "",
                gpu_paced_r=max((r for r in (num.get("throughput_gpu_paced_r"), den.get("throughput_gpu_paced_r"))
                                 if r is not None and not math.isnan(r)), default=None),
                aa=bool(num.get("adapters") is not None and num.get("adapters") == den.get("adapters")
                        and num.get("workload") == den.get("workload")),
            )
        )  # fmt: skip
    return out


MEMORY_FLAGS = {flag for flag, _ in MEMORY_ARGS.values()}


def server_comparisons(rows: list[dict[str, Any]], facts: Mapping[str, ServerFacts]) -> list[ServerComparison]:
    """Between the servers of each co-resident group (lorabench.group): every member's cell against the same
    condition and burst size on each member started before it (the group's order, ``config.group_servers`` in
    its facts), paired per cycle (stats.ratio_span); a row whose cells make too few pairs says "unpaired" and
    carries the span of the two medians' intervals instead."""
    groups: dict[str, list[str]] = {}
    for _, f in sorted(facts.items()):
        g = (f.config or {}).get("group")
        if g:
            groups.setdefault(g, list((f.config or {}).get("group_servers") or []))
    by_cell = {(r["server"], r["condition"], r["burst"]): r for r in rows if r.get("status") == "ok"}
    out = []
    for g, members in sorted(groups.items()):
        for i, server in enumerate(members):
            cells = sorted((cond, burst, num) for (s, cond, burst), num in by_cell.items() if s == server)
            for ref in members[:i]:
                for cond, burst, num in cells:
                    den = by_cell.get((ref, cond, burst))
                    if den is None:
                        continue
                    ratio = RatioSpan.of(ratio_span(num, den))
                    if ratio is None:
                        continue
                    n = len(paired_ratios(num, den))
                    out.append(ServerComparison(g, burst, cond, server, ref, ratio, n,
                                                "cycle (group)" if n else "unpaired",
                                                same_setup(facts.get(server), facts.get(ref))))  # fmt: skip
    return out


def same_setup(a: ServerFacts | None, b: ServerFacts | None) -> bool:
    """Whether two servers run the same engine with the same settings, apart from their group and their share of
    the GPU's memory (a cumulative share differs between two identical SGLang servers): an A/A pair."""
    if a is None or b is None or (a.engine, a.engine_version) != (b.engine, b.engine_version):
        return False

    def setup(f: ServerFacts) -> dict[str, Any]:
        cfg = {k: v for k, v in (f.config or {}).items() if k not in ("group", "group_servers")}
        cfg["args"] = {k: v for k, v in (cfg.get("args") or {}).items() if k not in MEMORY_FLAGS}
        return cfg

    return setup(a) == setup(b)


def burst_scaling(rows: list[dict[str, Any]]) -> list[BurstScaling]:
    """Within each server job and condition, the throughput at its largest burst against its smallest, paired per
    cycle (stats.ratio_span): how much a larger batch of the same mix gains."""
    out = []
    by_cell = {(r["server"], r["condition"], r["burst"]): r for r in rows if r.get("status") == "ok"}
    for server, cond in sorted({(s, c) for s, c, _ in by_cell}):
        bursts = sorted(b for s, c, b in by_cell if (s, c) == (server, cond))
        if len(bursts) < 2:
            continue
        big, small = by_cell[(server, cond, bursts[-1])], by_cell[(server, cond, bursts[0])]
        ratio = RatioSpan.of(ratio_span(big, small))
        if ratio is None:
            continue
        out.append(BurstScaling(server, cond, bursts[-1], bursts[0], ratio, len(paired_ratios(big, small))))
    return out


def _cell_rows(facts: Mapping[str, ServerFacts], mdf: pd.DataFrame, conditions: dict[str, Any]) -> pd.DataFrame:
    """One row per server x condition x burst that the servers' configs list, with its statistics where it was
    measured (summarize_cell) and a status that says why where it was not."""
    rows: list[dict[str, Any]] = []
    for server, fact in sorted(facts.items()):
        cfg = fact.config
        base = {
            "server": server,
            "engine": fact.engine,
            "engine_version": fact.engine_version,
            "status": fact.status,
            **{k: cfg.get(k) for k in SERVER_KEYS},
            **({"group": cfg["group"]} if cfg.get("group") else {}),
        }
        for cond in cfg.get("conditions", []):
            for burst in cfg.get("bursts", []):
                cell = {
                    **base,
                    "condition": cond,
                    "burst": burst,
                    "adapters": "|".join(conditions.get(cond, {}).get("adapters", [])),
                    "workload": workload_of(conditions.get(cond, {})),
                }
                if base["status"] == "ok" and len(mdf):
                    sel = mdf[(mdf["server"] == server) & (mdf["condition"] == cond) & (mdf["burst"] == burst)]
                    measured = sel[~sel["warmup"].astype(bool)]
                    warm = sel[sel["warmup"].astype(bool)]
                    if len(measured):
                        how = fact.measurement or {}
                        slow = float(how.get("outlier_fraction") or 0.75)
                        cell.update(summarize_cell(measured, warm, how.get("target_ci_pct"), slow).to_json())
                        cell["warmup_throughput"] = float(warm["throughput_tok_s"].median()) if len(warm) else None
                    else:
                        cell["status"] = "missing: no measurements"
                rows.append(cell)
    return pd.DataFrame(rows)


def _baseline_ratios(sdf: pd.DataFrame, baseline: dict[str, Any] | None) -> None:
    """Each row's median against the study's baseline cell at the same burst size, in percent."""
    sdf["baseline"] = ""
    sdf["ratio_to_baseline_pct"] = float("nan")
    if not baseline or not len(sdf) or "throughput_median" not in sdf:
        return
    bsel = sdf[(sdf["server"] == baseline["server"]) & (sdf["condition"] == baseline["condition"])]
    for _, b in bsel.iterrows():
        same = (sdf["burst"] == b["burst"]) & _same_workload(sdf, b)
        if b.get("throughput_median") and not math.isnan(b["throughput_median"]):
            sdf.loc[same, "ratio_to_baseline_pct"] = 100 * (
                sdf.loc[same, "throughput_median"] / b["throughput_median"] - 1
            )
            sdf.loc[same, "baseline"] = f"{baseline['server']}/{baseline['condition']}"


def _fact_row(server: str, f: ServerFacts) -> dict[str, Any]:
    """One server's facts as a table row: settings, readiness, what its log says, memory, where its time went."""
    lg = f.log or {}
    probes = f.probes or {}
    machine = f.machine or {}
    memory = f.memory or {}
    return {
        "server": server,
        "engine": f.engine,
        "engine_version": f.engine_version,
        "status": f.status,
        **{k: f.config.get(k) for k in SERVER_KEYS},
        "readiness_s": f.readiness_s,
        "kv_cache_tokens": lg.get("kv_cache_tokens"),
        "max_concurrency_x": lg.get("max_concurrency_x"),
        "cuda_graph_captures": lg.get("cuda_graph_captures"),
        "attention_backend": lg.get("attention_backend"),
        "torch_compile_s": lg.get("torch_compile_s"),
        "compile_cache": lg.get("compile_cache"),
        "readiness_starts_s": ";".join(f"{x:.1f}" for x in f.readiness_starts_s or []) or None,
        "engine_init_s": lg.get("engine_init_s"),
        "gpu_mem_ready_mib": f.gpu_used_mib("gpu_memory_ready_mib"),
        "gpu_mem_peak_mib": sum((probes.get("gpu_memory_peak_mib") or {}).values()) or None,
        "gpu_mem_after_stop_mib": f.gpu_used_mib("gpu_memory_after_stop_mib"),
        "host_rss_ready_mib": memory.get("host_rss_ready_mib"),
        "host_rss_end_mib": memory.get("host_rss_end_mib"),
        "hardware": machine.get("hardware"),
        "device": (machine.get("gpus") or [{}])[0].get("name") or machine.get("cpu"),
        "device_check": f.device_check,  # set only where the job ignored other runs' servers (device.py)
        "boot_id": machine.get("boot_id") or None,  # which machine (resources.boot_id); none in older facts
        # which CPU: generation and vector extensions (resources.cpu_identity); none in older facts
        "cpu_id": machine.get("cpu_id") or None,
        "cpu_isa": " ".join(machine.get("cpu_isa") or []) or None,
        "models_listed_ok": models_listed_ok(probes, list(f.config.get("adapters") or [])),
        **{f"time_{k}": v for k, v in (f.timing or {}).items()},
        "wrong_model_status": probes.get("wrong_model_status"),
    }


def _host_speed(fdf: pd.DataFrame, mdf: pd.DataFrame, baseline: dict[str, Any] | None) -> None:
    """Per server job, the median time of the fixed piece of work timed on the client's CPU around its
    measurements (``host_cpu_probe_ms``) and how much longer it took than during the baseline server's job
    (``host_slower_than_baseline_pct``): slower where the host runs slower or the client's CPU is busier between
    measurements. Server jobs run one after another, so what moves for minutes moves every ratio between two
    servers, which no cell's interval sees."""
    fdf["host_cpu_probe_ms"] = float("nan")
    fdf["host_slower_than_baseline_pct"] = float("nan")
    if not len(fdf) or "m_host_cpu_probe_ms" not in mdf or "server" not in mdf:
        return
    measured = mdf[~mdf["warmup"].fillna(False).astype(bool)] if "warmup" in mdf else mdf
    probe = pd.to_numeric(measured["m_host_cpu_probe_ms"], errors="coerce").groupby(measured["server"]).median()
    fdf["host_cpu_probe_ms"] = fdf["server"].map(probe)
    base = probe.get(baseline["server"]) if baseline else None
    if base and not math.isnan(base):
        fdf["host_slower_than_baseline_pct"] = 100 * (fdf["host_cpu_probe_ms"] / base - 1)


def aggregate(
    measurement_files: list[str],
    fact_files: list[str],
    runtime_files: list[str],
    env_files: list[str],
    baseline: dict[str, Any] | None,
    conditions: dict[str, Any],
    out: dict[str, str],
    prefix_files: list[str] | None = None,
) -> dict[str, Any]:
    """The study's tables from its server jobs: every measurement (measurements.csv), one row per cell with its
    statistics and ratios (summary.csv), one row per server's facts (server_facts.csv), and all of it with the
    runtime-loading results and environments in summary.json."""
    facts = {Path(f).parent.name: ServerFacts.from_json(read_json(f)) for f in fact_files}
    mdf = pd.DataFrame([_flatten(m) for f in measurement_files for m in read_jsonl(f)])
    Path(out["measurements"]).parent.mkdir(parents=True, exist_ok=True)
    mdf.to_csv(out["measurements"], index=False)
    sdf = _cell_rows(facts, mdf, conditions)
    _baseline_ratios(sdf, baseline)
    _engine_baselines(sdf)
    sdf.drop(columns=["values"], errors="ignore").to_csv(out["summary"], index=False)
    fdf = pd.DataFrame([_fact_row(server, f) for server, f in sorted(facts.items())])
    _host_speed(fdf, mdf, baseline)
    fdf.to_csv(out["facts"], index=False)
    runtime = [_runtime_result(read_json(f)) for f in runtime_files]
    prefix = [read_json(f) for f in prefix_files or []]
    envs = [read_json(f) for f in env_files]
    hardware = next((f.machine.get("hardware") for f in facts.values() if f.machine), None)
    records = [_record(r) for r in sdf.to_dict("records")]
    measured = [{k: _clean(v) for k, v in r.items()} for r in mdf.to_dict("records")] if len(mdf) else []
    summary = {
        "schema": SUMMARY_SCHEMA,
        "baseline": baseline,
        "hardware": hardware,
        "rows": records,
        "per_adapter": [
            {"server": server, **pooled_names(row), "workload": workload_of(conditions.get(row["condition"]) or {})}
            for server, f in sorted(facts.items())
            for row in (f.per_adapter or [])
        ],
        "engine_comparison": [c.to_json() for c in engine_comparison(records)],
        "comparisons": [c.to_json() for c in paired_comparisons(records, facts)],
        "server_comparisons": [c.to_json() for c in server_comparisons(records, facts)],
        "burst_scaling": [c.to_json() for c in burst_scaling(records)],
        "warm_cold": warm_cold_rows(measured, baseline),
        "phases": phase_costs(records, facts),
        "facts": [_record(r) for r in fdf.to_dict("records")],
        "server_facts_raw": {server: f.to_json() for server, f in facts.items()},
        "runtime": runtime,
        "prefix_cache": prefix,
        "envs": envs,
        "conditions": conditions,
        "measurements": measured,
    }
    write_json(out["json"], json.loads(json.dumps(summary, default=_clean)))
    log.info("summary: %d rows (%d measured), %d servers", len(sdf), int((sdf["status"] == "ok").sum()), len(facts))
    return summary


def warm_cold_rows(measurements: list[dict[str, Any]], baseline: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each mix's cost against the baseline's condition (paired per cycle), split by the state its bursts started
    from (carry_over.warm_cold: its adapters resident in the slots, or not), for the cells that have bursts of both;
    ``measurements`` as summary.json holds them."""
    if not baseline:
        return []
    return [w.to_json() for w in warm_cold(measurements, baseline.get("condition")) if w.warm.n and w.cold.n]


def _runtime_result(load: dict[str, Any]) -> dict[str, Any]:
    """A runtime-loading result with its figures recomputed from its cycles by this checkout's code
    (lorabench.runtime_figures.load_result), so a study rebuilt from saved results shows what a fresh run would; a
    job that measured nothing (no cycles) is kept as it is."""
    keys = ("cycles", "adapter", "burst", "resident_adapter", "unlisted_path_refused")
    if not all(k in load for k in keys):
        return load
    rl = RuntimeLoad(adapter=load["adapter"], burst=load["burst"])
    return {**load, **load_result(load["cycles"], rl, load["resident_adapter"], load["unlisted_path_refused"])}
