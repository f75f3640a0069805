"""Study slot-queues, CPU-sized, end to end with real vLLM (CPU build) servers: queue figures per condition, the
cliff comparison and its claim's computed verdict, the report's queue section and plot (slow: about 3 minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorabench.io import read_json
from lorabench.queues import cliff_sentence

from .test_pipeline_e2e import run_study

pytestmark = [pytest.mark.slow, pytest.mark.full]


@pytest.fixture(scope="module")
def slot_queues(tmp_path_factory: pytest.TempPathFactory, built_inputs: Path) -> Path:
    # the one adapter and the three of the cliff (its 'ab' left out: one burst fewer a cycle on each server)
    return run_study(
        tmp_path_factory.mktemp("slot-queues"), "config/studies/slot-queues-cpu.yaml", built_inputs,
        conditions=["a", "abc"],
    )  # fmt: skip


def test_queues_sampled_in_flight_for_every_condition(slot_queues: Path):
    q = read_json(slot_queues / "results/queues/queues.json")
    servers = {s["server"]: s for s in q["servers"]}
    assert set(servers) == {"lora-2", "lora-4"}
    for s in servers.values():
        assert s["reports"] == ["running", "waiting", "deferred"]
        for c in s["cells"]:
            assert c["traces"] and c["measurements"] == 6 * 2, c  # 6 cycles, a non-streamed and a streamed burst
            # every burst is scraped while its requests run (at least half: a scrape may still land just before the
            # first request arrives or after the last one ends)
            assert c["measurements_in_flight"] * 2 >= c["measurements"] and c["batch_median"] > 0, c
            # every request of the cell's 6 streamed bursts of 8 (the non-streamed ones have no TTFT)
            assert c["ttft_requests"] == 6 * 8 and c["ttft_p50_ms"] <= c["ttft_p90_ms"] <= c["ttft_p99_ms"]
    # Three adapters on 2 slots: requests wait for a slot, so every measurement catches some in flight, deferred.
    abc = next(c for c in servers["lora-2"]["cells"] if c["condition"] == "abc")
    assert abc["source"] == "measurements" and abc["measurements_in_flight"] >= 3 and abc["deferred_max"] > 0, abc
    # With slots to spare nothing waits for one.
    assert all(c["deferred_max"] in (0, None) for c in servers["lora-4"]["cells"])


def test_cliff_claim_has_a_computed_verdict_and_the_report_shows_it(slot_queues: Path):
    q = read_json(slot_queues / "results/queues/queues.json")
    (cliff,) = q["cliffs"]
    few, many = cliff["few"], cliff["many"]
    assert (cliff["condition"], cliff["burst"], cliff["distinct_adapters"]) == ("abc", 8, 3), cliff
    assert (few["server"], few["slots"], many["server"], many["slots"]) == ("lora-2", 2, "lora-4", 4), cliff
    assert few["metrics"] == many["metrics"] == "during" and cliff["queue_series"] == "deferred", cliff
    # The client keeps a connection for the sampler beside the burst's (metrics.METRICS_CONNECTIONS), so both
    # sides are caught in flight: before, a 4-slot burst, whose 8 requests start and finish together, held every
    # connection and its scrapes waited for it to end (0-2 of 2-4 measurements caught in flight).
    assert few["measurements_in_flight"] >= 3 and cliff["queued_few"] > 0, cliff
    assert many["measurements_in_flight"] >= 3, cliff
    # At most 2 of the 3 adapters run together on 2 slots (at most 6 of the 8 requests), all 8 on 4 slots
    assert few["batch_hi"] < many["batch_lo"], cliff
    finding, verdict = "smaller batch", "reproduced"
    assert cliff["finding"] == finding, cliff
    verdicts = {c["id"]: c for c in read_json(slot_queues / "results/claims/verdicts.json")["claims"]}
    v = verdicts["s4-cliff-cause-deferral"]
    assert v["verdict"] == verdict and v["why"] == cliff_sentence(cliff), v
    assert v["evidence"] == ["queues:lora-2/abc/8", "queues:lora-4"], v
    html = (slot_queues / "results/report/index.html").read_text()
    assert "Why the cliff: batch size and queues" in html and "queues.png" in html
    assert (slot_queues / "results/report/queues.png").stat().st_size > 10000
