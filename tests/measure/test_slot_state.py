"""What a burst row records of what came before it: its predecessor and the adapters inferred resident (the slot
state), from the history alone, in a burst row's JSON, and through a whole server job against the fake server."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from lorabench.engines import ServerSettings, ServerSpec, get_engine
from lorabench.job import ServerJob
from lorabench.loadgen.client import make_session
from lorabench.measure.burst import Burst, BurstFigures
from lorabench.measure.measurer import Measurer, adapter_slots
from lorabench.measure.slot_state import FIELDS, SlotHistory, SlotState, distinct_adapters

from ..support.fake_server import start_in_process


def test_the_history_keeps_the_most_recent_adapters_that_fit_the_slots():
    h = SlotHistory(slots=2)
    first = h.before(["p", "p"])
    assert first == SlotState(None, None, (), ("p",))  # nothing sent yet on this server start
    h.after("p/4/n", "warmup/p/4/n/0", ["p", "p"])
    s = h.before(["p", "q", "base"])
    assert (s.predecessor, s.predecessor_id, s.resident_inferred) == ("p/4/n", "warmup/p/4/n/0", ("p",))
    assert s.burst_adapters == ("p", "q") and s.warm is False  # q is not resident yet: a cold start
    h.after("pq/4/n", "pq/4/n/0", ["p", "q", "base"])
    assert h.before(["q", "p"]).resident_inferred == ("q", "p") and h.before(["q", "p"]).warm is True
    h.after("pqr/4/n", "pqr/4/n/0", ["p", "q", "r", "p", "q", "r"])
    assert h.resident() == ["r", "q"]  # three adapters through two slots: the last two used stay
    h.after("base/4/n", "base/4/n/0", ["base", "base"])  # the base model takes no slot
    s = h.before(["base"])
    assert s.resident_inferred == ("r", "q") and s.predecessor == "base/4/n" and s.warm is None
    h.reset()  # a fresh server start
    assert h.before(["p"]) == SlotState(None, None, (), ("p",))


def test_without_lora_nothing_is_resident_and_with_unknown_slots_everything_since_the_start():
    off = SlotHistory(slots=0)
    off.after("base/4/n", "x", ["base"])
    assert off.before(["base"]).resident_inferred == () and off.before(["base"]).burst_adapters == ()
    unknown = SlotHistory(slots=None)
    for a in "abc":
        unknown.after(f"{a}/1/n", a, [a])
    assert unknown.resident() == ["c", "b", "a"]
    assert distinct_adapters(["b", "base", "a", "b", ""]) == ["b", "a"]
    spec = ServerSpec(server_id="t", engine="vllm", python="python", model_path="/m", served_name="m", lora=True)
    assert adapter_slots(get_engine("vllm"), spec) == 1  # vLLM's own default, --max-loras 1
    assert adapter_slots(get_engine("sglang"), spec) == 8
    assert adapter_slots(get_engine("vllm"), dataclasses.replace(spec, max_loras=4)) == 4
    assert adapter_slots(get_engine("vllm"), dataclasses.replace(spec, lora=False)) == 0


def _burst(state: SlotState | None) -> Burst:
    nan = float("nan")
    figures = BurstFigures(4, 4, 0, [], 32, 16, 0.1, 0.1, 1, [320.0], 0, 320.0, 320.0, nan, nan, 0.1, nan, nan, nan,
                           nan, nan, nan, 0.1, 0.1, 0.1, 0.0)  # fmt: skip
    return Burst("t", "pq", 4, False, 3, 11, False, "pq/4/n/3", 0, figures, cycle=3, position=2, slot_state=state)


def test_a_burst_row_carries_its_slot_state_and_an_older_row_reads_without_it():
    state = SlotState("p/4/n", "p/4/n/3", ("p",), ("p", "q"))
    row = json.loads(json.dumps(_burst(state).to_json()))
    assert row["schema"] == "lorabench.burst/2" and (row["cycle"], row["position"], row["order"]) == (3, 2, 11)
    assert {k: row[k] for k in FIELDS} == {"predecessor": "p/4/n", "predecessor_id": "p/4/n/3",
                                           "resident_inferred": ["p"], "burst_adapters": ["p", "q"]}  # fmt: skip
    assert Burst.from_json(row).slot_state == state and Burst.from_json(row).to_json() == row
    assert not set(FIELDS) & set(_burst(state).identity())  # the request rows carry the burst's name, not its state
    first = json.loads(json.dumps(_burst(SlotState(None, None, (), ("p",))).to_json()))
    assert first["predecessor"] is None and first["resident_inferred"] == []  # recorded: nothing came before
    old = {k: v for k, v in row.items() if k not in FIELDS}  # a row written before the slot state was recorded
    assert Burst.from_json(old).slot_state is None and Burst.from_json(old).to_json() == old


@pytest.fixture(scope="module")
def url():
    proc, port = start_in_process(delay=0.001)
    yield f"http://127.0.0.1:{port}"
    proc.kill()


SETS = {"base/2": ["base", "base"], "p/2": ["p", "p"], "pq/2": ["p", "q"]}
RSET = {
    "prompt": "x",
    "max_tokens": 4,
    "temperature": 0.0,
    "ignore_eos": True,
    "sets": {k: [{"request_id": f"{k}-{i}", "adapter": a} for i, a in enumerate(v)] for k, v in SETS.items()},
}
SPEC = ServerSpec(server_id="t", engine="vllm", python="python", model_path="/m", served_name="m", lora=True,
                  max_loras=1, adapters={"p": "/p", "q": "/q"})  # fmt: skip


def _job_rows(url: str, monkeypatch, seed: int, cycles: int = 8) -> list[dict]:
    """A whole job's rows (warm-up included) against the fake server: base, p and pq at burst 2, non-streamed,
    ``cycles`` cycles on one vLLM server with one slot; canary and probes left out."""
    import lorabench.measure.measurer as lt

    async def nothing(*a, **k):
        return {}

    server = ServerSettings(server_id="t", engine="vllm", served_name="m", lora=True, max_loras=1)
    job = ServerJob(server=server, conditions=["base", "p", "pq"], bursts=[2], stream="off", repetitions=cycles,
                    max_repetitions=cycles, hardware="cpu", shuffle_seed=seed)  # fmt: skip

    async def run() -> list[dict]:
        async with make_session(4) as s:
            m = Measurer(job, get_engine("vllm"), SPEC, url, RSET, s)
            probes = await m.run(None)
            assert probes["cycles"]["order_seed"] == seed and probes["cycles"]["order"] == "random per cycle"
            return [b.to_json() for b in m.measurements]

    with monkeypatch.context() as mp:
        mp.setattr(lt, "probe_server", nothing)
        mp.setattr(lt, "canary", nothing)
        return asyncio.run(run())


@pytest.mark.integration
def test_every_burst_of_a_job_records_its_predecessor_and_what_was_resident(url, monkeypatch):
    rows = _job_rows(url, monkeypatch, seed=3)
    warm, measured = [r for r in rows if r["warmup"]], [r for r in rows if not r["warmup"]]
    assert len(warm) == 3 and len(measured) == 3 * 8
    assert all(set(FIELDS) <= set(r) for r in rows)
    # the first burst after the server started has none; every later one names the burst sent just before it,
    # and the first measured burst the warm-up's last
    assert warm[0]["predecessor"] is None and warm[0]["resident_inferred"] == []
    for before, row in zip(rows, rows[1:], strict=False):
        assert row["predecessor_id"] == before["measurement_id"]
        assert row["predecessor"] == "/".join(before["measurement_id"].removeprefix("warmup/").split("/")[:3])
    assert measured[0]["predecessor_id"] == warm[-1]["measurement_id"]
    # one slot: what was resident is the last adapter the burst before used (or, after base, the one before it)
    last_adapter = None
    for row in rows:
        assert row["resident_inferred"] == ([last_adapter] if last_adapter else [])
        last_adapter = SETS[f"{row['condition']}/2"][-1] if row["condition"] != "base" else last_adapter
    assert {r["burst_adapters"] == ["p", "q"] for r in measured if r["condition"] == "pq"} == {True}
    # each cycle holds every cell once, in the position its row records, and the orders differ between cycles
    for c in range(8):
        cyc = sorted((r for r in measured if r["cycle"] == c), key=lambda r: r["position"])
        assert [r["position"] for r in cyc] == [0, 1, 2] and sorted(r["condition"] for r in cyc) == ["base", "p", "pq"]
        assert [r["order"] for r in cyc] == list(range(3 * c, 3 * c + 3))
    orders = {tuple(r["condition"] for r in measured if r["cycle"] == c) for c in range(8)}
    assert len(orders) > 1
    before_p = {r["predecessor"] for r in measured if r["condition"] == "p"}
    assert {"base/2/n", "pq/2/n"} <= before_p  # p follows both other cells: no fixed predecessor
    # so p starts from more than one slot state
    states = {(r["predecessor"], tuple(r["resident_inferred"])) for r in measured if r["condition"] == "p"}
    assert len(states) > 1
    # the same seed sends the same orders again; the rows carry it
    again = [r for r in _job_rows(url, monkeypatch, seed=3) if not r["warmup"]]
    assert [(r["condition"], r["cycle"], r["position"]) for r in again] == [
        (r["condition"], r["cycle"], r["position"]) for r in measured
    ]
