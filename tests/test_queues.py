"""Batch size and queues from sampled engine metrics: parsing, per-cell figures, the cliff comparison, the claim
probe's verdicts and the plot, on small synthetic metric tables (no server)."""

from __future__ import annotations

import copy
from pathlib import Path

from lorabench import plots, queues
from lorabench.claims import Context, Verdict, evaluate, load_claims
from lorabench.facts import ServerFacts
from lorabench.io import read_json, write_json, write_jsonl

from .conftest import FIXTURES, ROOT

CONDITIONS = {"a": {"adapters": ["a"]}, "ab": {"adapters": ["a", "b"]}, "abc": {"adapters": ["a", "b", "c"]}}


def _rows(mid: str, t0: float, points: list[tuple[float, float, float]]) -> list[dict]:
    """vLLM-named metric rows for one measurement: (running, waiting, deferred) per sample, 50 ms apart."""
    out = []
    for i, (run, wait, dfr) in enumerate(points):
        t = t0 + 0.05 * i
        base = {"measurement_id": mid, "t": t}
        out += [
            {**base, "name": "vllm:num_requests_running", "labels": {"engine": "0"}, "value": run},
            {**base, "name": "vllm:num_requests_waiting", "labels": {"engine": "0"}, "value": wait},
            {**base, "name": "vllm:num_requests_waiting_by_reason", "labels": {"reason": "deferred"}, "value": dfr},
            {**base, "name": "vllm:num_requests_waiting_by_reason", "labels": {"reason": "capacity"}, "value": 0.0},
            {**base, "name": "vllm:lora_requests_info", "labels": {"running_lora_adapters": "a,b"}, "value": t},
        ]
    return out


def _server(
    name: str, slots: int, abc_batch: list[float], reps: int = 6, jitter: float = 0.0
) -> tuple[list[dict], dict]:
    rows: list[dict] = []
    t = 1000.0
    for rep in range(reps):
        for cond in ("a", "abc"):
            if cond == "abc":
                busy = [b + jitter * (rep % 3) for b in abc_batch]
                pts = [(0.0, 0.0, 0.0)] + [(b, 8 - b, 8 - b if slots < 3 else 0) for b in busy] + [(0.0, 0.0, 0.0)]
            else:
                pts = [(0.0, 0.0, 0.0), (8.0, 0.0, 0.0), (8.0, 0.0, 0.0), (0.0, 0.0, 0.0)]
            rows += _rows(f"{cond}/8/{rep}", t, pts)
            t += 10
    rows += _rows("warmup/abc/8/0", 900.0, [(3.0, 5.0, 5.0)])
    facts = {
        "server": name,
        "engine": "vllm",
        "status": "ok",
        "config": {"lora": True, "max_loras": slots},
        "harness": {"metrics": "during"},
    }
    return rows, facts


def _queues(
    tmp_path: Path, few_batch: list[float], many_batch: list[float], reps: int = 6, jitter: float = 0.0
) -> dict:
    files_m, files_f = [], []
    for name, slots, batch in (("lora-2", 2, few_batch), ("lora-4", 4, many_batch)):
        rows, facts = _server(name, slots, batch, reps, jitter)
        write_jsonl(tmp_path / f"{name}.metrics.jsonl", rows)
        write_json(tmp_path / f"{name}.facts.json", facts)
        files_m.append(str(tmp_path / f"{name}.metrics.jsonl"))
        files_f.append(str(tmp_path / f"{name}.facts.json"))
    return queues.aggregate(files_m, files_f, CONDITIONS, tmp_path / "queues.json")


def test_measurement_ids_parse():
    assert queues.parse_measurement_id("abc/18/3") == ("abc", 18, False)
    assert queues.parse_measurement_id("warmup/ab-base/48/1/start1") == ("ab-base", 48, True)


def test_series_fold_reasons_and_skip_adapter_sets():
    names = {
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "waiting",
        "vllm:num_requests_waiting_by_reason_deferred": "deferred",
    }
    s = queues.series_by_measurement(_rows("abc/8/0", 0.0, [(2.0, 6.0, 6.0)]), names)
    assert s == {"abc/8/0": [{"t": 0.0, "running": 2.0, "waiting": 6.0, "deferred": 6.0}]}


def test_cell_figures_from_in_flight_samples_only(tmp_path):
    q = _queues(tmp_path, [2.0, 2.0, 2.0], [8.0, 8.0, 8.0])
    few = next(s for s in q["servers"] if s["server"] == "lora-2")
    abc = next(c for c in few["cells"] if c["condition"] == "abc")
    # idle samples at either end are left out: the batch is 2, six requests deferred throughout
    assert abc["batch_median"] == 2.0 and abc["deferred_mean"] == 6.0 and abc["deferred_share_pct"] == 100.0
    assert abc["measurements_in_flight"] == 6 and abc["source"] == "measurements"
    assert abc["distinct_adapters"] == 3 and len(abc["traces"]) == queues.MAX_TRACES
    assert abc["traces"][0][0] == [0.0, 0.0, 0.0, 0.0]


def test_cliff_smaller_batch_reproduces_the_claim(tmp_path):
    q = _queues(tmp_path, [2.0, 2.0, 3.0], [8.0, 8.0, 8.0])
    (c,) = q["cliffs"]
    assert (c["condition"], c["burst"], c["finding"]) == ("abc", 8, "smaller batch")
    assert "2 slots" in queues.cliff_sentence(c) and "beyond both intervals" in queues.cliff_sentence(c)
    r = _verdict(q)
    assert r.verdict == "reproduced" and r.evidence


def test_cliff_overlap_or_too_few_samples_is_inconclusive_and_never_sampled_is_not_run(tmp_path):
    q = _queues(tmp_path, [6.0, 6.0, 6.0], [7.0, 7.0, 7.0], jitter=1.0)  # per-measurement batches 6-8 vs 7-9
    assert q["cliffs"][0]["finding"] == "overlap"
    assert _verdict(q).verdict == "inconclusive"
    q2 = _queues(tmp_path, [2.0], [8.0], reps=2)  # scraped during the measurements, but only two of them
    assert q2["cliffs"][0]["finding"] == "too few samples"
    r = _verdict(q2)
    assert r.verdict == "inconclusive" and "came back while requests were in flight" in r.why
    # scraped between bursts only (harness.metrics: between): the warm-up bursts alone were sampled in flight
    c = {**q2["cliffs"][0]}
    c["few"] = {**c["few"], "metrics": "between"}
    assert "set harness.metrics: during" in queues.cliff_sentence(c)
    r = _verdict({**q2, "cliffs": [c]})
    assert r.verdict == "not run" and "set harness.metrics: during" in r.why


def test_no_smaller_batch_contradicts(tmp_path):
    q = _queues(tmp_path, [8.0, 8.0, 8.0], [4.0, 4.0, 4.0])
    assert q["cliffs"][0]["finding"] == "no smaller batch"
    assert _verdict(q).verdict == "contradicted"


def test_warm_up_samples_used_only_when_measurements_were_idle(tmp_path):
    rows, facts = _server("lora-2", 2, [2.0])
    rows = [r for r in rows if r["measurement_id"].startswith("warmup") or r["name"].endswith("lora_requests_info")]
    s = queues.server_queues(rows, ServerFacts.from_json(facts), CONDITIONS)
    (abc,) = [c for c in s["cells"] if c.condition == "abc"]
    assert abc.source == "warm-up bursts" and abc.in_flight.batch_median == 3.0
    assert queues.QueueCell.from_json(abc.to_json()) == abc  # the cell queues.json holds reads back as it was


def _verdict(q: dict) -> Verdict:
    run = FIXTURES / "cpu-run"
    ctx = Context(
        read_json(run / "summary.json"),
        read_json(run / "model.json"),
        [read_json(run / f"adapter-{a}.json") for a in "abc"],
        None,
        copy.deepcopy(q),
    )
    claims = [c for c in load_claims(ROOT / "config" / "claims.yaml") if c["id"] == "s4-cliff-cause-deferral"]
    (r,) = evaluate(claims, ctx)
    return r


def test_queue_plot_renders(tmp_path):
    q = _queues(tmp_path, [2.0, 2.0, 3.0], [8.0, 8.0, 8.0])
    out = plots.queue_traces(q, tmp_path / "queues.png", ["a", "ab", "abc"])
    assert out and out.stat().st_size > 5000
    assert plots.queue_traces({"servers": []}, tmp_path / "none.png", ["a"]) is None


def test_the_p90_interval_is_of_the_pooled_p90_it_stands_beside():
    """Bursts of 8 where one request in each waits for a slot (many-adapters-cpu, 2 slots): the pooled p90 is a
    waiting request's TTFT; its interval, resampling whole bursts, holds it (the median of per-burst p90s, each
    interpolated between a burst's two slowest requests, read about 117 ms and left it out)."""
    from lorabench.queues import percentile, pooled_interval

    bursts = [[22.5 + i, *([39.8 - i] * 6), 296.4 - i] for i in range(6)]
    pooled = [v for b in bursts for v in b]
    p90 = percentile(pooled, 90)
    lo, hi = pooled_interval(bursts, 90)
    assert 280 < lo <= p90 <= hi < 300
    assert pooled_interval(bursts, 90) == (lo, hi)  # seeded: the same values, the same interval
    assert pooled_interval(bursts[:1], 90) is None
