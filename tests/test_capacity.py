"""Capacity at the SLO across servers (lorabench.capacity) from sweep.json files made of synthetic points: the
table per mix, the bound marks, goodput at capacity, LoRA's cost against the engine's LoRA-off server, the sizing
sentence, the plots, and the include template rendering the dict."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jinja2
import pytest

from lorabench.capacity import ServerInfo, SweepFile, capacity_model, capacity_rows, mark_of, sizing_findings
from lorabench.io import write_json
from lorabench.measure.sweep import Capacity, RatePoint, SweepResult
from lorabench.report_model import capacity_findings

from .conftest import ROOT
from .measure.test_sweep import SLO, dataclass_with, point

SERVERS = {
    "off": ServerInfo("vllm", False),
    "l2": ServerInfo("vllm", True, 2),
    "l4": ServerInfo("vllm", True, 4),
    "sg-off": ServerInfo("sglang", False),
}


def sweep(
    server: str,
    mix: str,
    ttfts_by_cycle: list[list[float]],
    rates: tuple[float, ...] = (2, 4, 6),
    front_end: dict[float, float] | None = None,
) -> dict:
    """A sweep of one mix: per cycle, the p99 TTFT at each rate (goodput = rate / 2 at every point); ``front_end``:
    the front end's CPU share recorded at each rate (none recorded without it)."""
    pts = [
        dataclass_with(
            point(r, t, cycle=c),
            server=server,
            mix=mix,
            goodput_per_s=r / 2,
            fraction=r / 10,
            host={"front_end_cpu": front_end[r], "gpu_busy_pct": 80.0} if front_end else {},
        )  # fmt: skip
        for c, ttfts in enumerate(ttfts_by_cycle)
        for r, t in zip(rates, ttfts, strict=True)
    ]
    probe = RatePoint.from_json(point(10, 500).to_json() | {"shape": "concurrency", "fraction": None})
    res = SweepResult(server, mix, 10.0, probe, [r / 10 for r in rates], pts, len(ttfts_by_cycle), "")
    return res.to_json()


def write_sweep(tmp: Path, server: str, sweeps: list[dict], status: str = "ok", mixes: list[str] | None = None) -> Path:
    path = tmp / server / "sweep.json"
    path.parent.mkdir(parents=True)
    data = {"schema": "lorabench.sweep_job/1", "server": server, "status": status, "slo": SLO.to_json(),
            "mixes": mixes or [s["mix"] for s in sweeps], "sweeps": sweeps}  # fmt: skip
    write_json(path, data)
    return path


SIX = 6


@pytest.fixture
def study(tmp_path: Path) -> list[Path]:
    """LoRA off meets 100 ms p99 TTFT up to ~5.0 req/s on base; 2 slots ~4.4 on base, ~3.0 on z; 4 slots: z's
    every rate meets (a lower bound); SGLang's LoRA-off server did not run."""
    return [
        write_sweep(tmp_path, "off", [sweep("off", "base", [[40, 70, 130]] * SIX)]),
        write_sweep(
            tmp_path, "l2", [sweep("l2", "base", [[40, 80, 180]] * SIX), sweep("l2", "z", [[60, 120, 300]] * SIX)]
        ),
        write_sweep(tmp_path, "l4", [sweep("l4", "z", [[20, 30, 40]] * SIX)]),
        write_sweep(tmp_path, "sg-off", [], status="not run: needs a GPU", mixes=["base"]),
    ]


def _rows(study: list[Path]):
    return {(r.mix, r.server): r for r in capacity_rows([SweepFile.read(p) for p in study], SERVERS)}


def test_the_table_gives_capacity_its_interval_and_goodput(study):
    rows = _rows(study)
    off, l2 = rows[("base", "off")], rows[("base", "l2")]
    assert off.ok and off.n == SIX and off.mark == ""
    assert off.capacity_per_s == pytest.approx(4 + 2 * 30 / 60)  # 70 -> 130 ms crosses 100 at half way
    assert l2.capacity_per_s == pytest.approx(4.4)
    assert l2.goodput_per_s == pytest.approx(2.0)  # at the last rate meeting the SLO (4/s): 4 / 2
    assert rows[("base", "sg-off")].status == "not run: needs a GPU" and not rows[("base", "sg-off")].ok


def test_a_capacity_beyond_the_measured_rates_is_marked(study):
    rows = _rows(study)
    assert rows[("z", "l4")].mark == ">=" and rows[("z", "l4")].censored == SIX
    assert rows[("z", "l4")].capacity_per_s == 6
    half = SweepResult.from_json(sweep("x", "m", [[200, 300, 400]] * 3 + [[40, 80, 180]] * 3))
    assert mark_of(Capacity.of(half, SLO)) == "<"  # half the cycles fail at the lowest rate
    few = SweepResult.from_json(sweep("x", "m", [[200, 300, 400]] * 2 + [[40, 80, 180]] * 4))
    assert mark_of(Capacity.of(few, SLO)) == ""


def test_lora_cost_is_against_the_same_engines_lora_off_server(study):
    rows = _rows(study)
    l2 = rows[("base", "l2")]
    assert l2.lora_reference == "off/base"
    assert l2.lora_cost_pct == pytest.approx(100 * (4.4 / 5.0 - 1))
    assert l2.lora_cost_lo_pct <= l2.lora_cost_pct <= l2.lora_cost_hi_pct
    # a mix the LoRA-off server cannot serve is compared with its base mix, and says so
    assert rows[("z", "l2")].lora_reference == "off/base"
    assert math.isnan(rows[("base", "off")].lora_cost_pct)  # the reference itself has none


def test_the_sizing_sentence_names_the_best_configuration(study):
    rows = list(_rows(study).values())
    base, z = sizing_findings(rows, SERVERS, SLO, {"z": {"adapters": ["a", "b"], "assignment": "zipf"}})
    assert base.startswith("For mix base, off (vllm, LoRA off) serves the most") and "next l2 at 4.40" in base
    assert "Enabling LoRA costs l2 -12 %" in base
    assert "(95 % interval 5.00-5.00, 6 cycles; set by p99 TTFT in 6 of 6 cycles)" in base
    assert z.startswith("For mix z (2 adapters, Zipf s=1.1), l4 (vllm, LoRA on, 4 slots)") and "at least 6.00" in z
    # the intervals are single values here (identical cycles): apart
    assert "the intervals apart" in z


def test_the_term_that_set_capacity_is_named_cycle_by_cycle(tmp_path):
    """4 cycles cross the TTFT bound between 4 and 6 req/s, 2 are over-saturated at 6 (capacity 4)."""
    ttft = [
        dataclass_with(point(r, t, cycle=c), server="l2", mix="z") for c in range(4) for r, t in ((4, 80), (6, 180))
    ]
    over = [dataclass_with(point(r, 60, over="achieved 70 %" if r == 6 else "", cycle=c), server="l2", mix="z")
            for c in range(4, SIX) for r in (4, 6)]  # fmt: skip
    probe = RatePoint.from_json(point(10, 500).to_json() | {"shape": "concurrency", "fraction": None})
    res = SweepResult("l2", "z", 10.0, probe, [0.4, 0.6], ttft + over, SIX, "")
    (row,) = capacity_rows([SweepFile.read(write_sweep(tmp_path, "l2", [res.to_json()]))], SERVERS)
    assert row.limit == "p99 TTFT in 4 of 6 cycles, over-saturation in 2"
    (text,) = sizing_findings([row], SERVERS, SLO)
    assert "6 cycles; set by p99 TTFT in 4 of 6 cycles, over-saturation in 2)" in text


def test_lora_costs_are_given_per_engine(tmp_path):
    """vLLM and SGLang each with a LoRA-off and a 2-slot server: the sentence gives both engines' costs."""
    servers = SERVERS | {"sg-l2": ServerInfo("sglang", True, 2)}
    paths = [
        write_sweep(tmp_path, "off", [sweep("off", "base", [[40, 70, 130]] * SIX)]),
        write_sweep(tmp_path, "l2", [sweep("l2", "z", [[40, 80, 180]] * SIX)]),
        write_sweep(tmp_path, "sg-off", [sweep("sg-off", "base", [[40, 80, 180]] * SIX)]),
        write_sweep(tmp_path, "sg-l2", [sweep("sg-l2", "z", [[60, 120, 300]] * SIX)]),
    ]
    _, z = sizing_findings(capacity_rows([SweepFile.read(p) for p in paths], servers), servers, SLO)
    assert "Enabling LoRA costs l2 -12 % of capacity against off/base" in z
    assert "; sg-l2 -24 % of capacity against sg-off/base" in z  # 3.33 against 4.4


def test_a_lora_off_capacity_that_is_a_lower_bound_bounds_the_cost(tmp_path):
    """LoRA off meets at every rate up to 6/s (at least 6): 2 slots' 4.4/s costs at most -27 % (<=), and a 4-slot
    server that also met everything (at least 3) leaves the cost open in both directions: not computed."""
    paths = [
        write_sweep(tmp_path, "off", [sweep("off", "base", [[20, 30, 40]] * SIX)]),
        write_sweep(tmp_path, "l2", [sweep("l2", "z", [[40, 80, 180]] * SIX)]),
        write_sweep(tmp_path, "l4", [sweep("l4", "z", [[20, 30, 40]] * SIX, rates=(1, 2, 3))]),
    ]
    rows = {r.server: r for r in capacity_rows([SweepFile.read(p) for p in paths], SERVERS)}
    assert rows["off"].capacity_per_s == 6 and rows["off"].mark == ">="
    assert rows["l2"].lora_cost_mark == "<=" and rows["l2"].lora_cost_pct == pytest.approx(100 * (4.4 / 6 - 1))
    assert math.isnan(rows["l4"].lora_cost_pct) and rows["l4"].lora_reference == ""
    _, z = sizing_findings(list(rows.values()), SERVERS, SLO)
    assert "l2 <=-27 % of capacity against off/base" in z


def test_a_runner_up_that_is_a_lower_bound_is_not_told_apart(tmp_path):
    """2 slots meets at 4.4/s in every cycle; on 4 slots every rate up to 3/s meets (at least 3): its interval ends
    at 3, below 4.4, but its capacity may lie anywhere above."""
    paths = [
        write_sweep(tmp_path, "l2", [sweep("l2", "z", [[60, 80, 180]] * SIX)]),
        write_sweep(tmp_path, "l4", [sweep("l4", "z", [[20, 30, 40]] * SIX, rates=(1, 2, 3))]),
    ]
    (text,) = sizing_findings(capacity_rows([SweepFile.read(p) for p in paths], SERVERS), SERVERS, SLO)
    assert "next l4 at >=3.00" in text and "a lower bound, so the two are not told apart" in text


def test_a_mix_no_server_meets_is_said_so(tmp_path):
    p = write_sweep(tmp_path, "l2", [sweep("l2", "z", [[200, 300, 400]] * SIX)])
    rows = capacity_rows([SweepFile.read(p)], SERVERS)
    assert sizing_findings(rows, SERVERS, SLO) == [
        "For mix z, no server met p99 TTFT <= 100 ms and p99 ITL <= 20 ms at any rate measured."
    ]


def test_the_model_renders_through_the_include_with_its_plots(study, tmp_path):
    model = capacity_model(study, SERVERS, {"z": {"adapters": ["a", "b"], "assignment": "zipf"}}, tmp_path / "plots")
    assert [m["mix"] for m in model["mixes"]] == ["base", "z"]
    base_rows = model["mixes"][0]["rows"]
    assert [r["server"] for r in base_rows] == ["off", "l2", "sg-off"]  # capacity descending, not run last
    assert base_rows[1]["capacity"] == "4.40" and base_rows[1]["lora_cost"].startswith("-12 %")
    assert model["mixes"][1]["rows"][0]["capacity"] == ">=6.00"
    assert model["not_run"] == ["sg-off: not run: needs a GPU"]
    plots = model["plots"]
    assert plots["capacity"] == "capacity.png" and set(plots["latency"]) == {"base", "z"}
    assert all((tmp_path / "plots" / f).stat().st_size > 1000 for m in plots["latency"].values() for f in m.values())
    json.dumps(model, allow_nan=False)  # plain JSON: no NaN in the file

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "report" / "templates"), autoescape=True)
    html = env.get_template("sections/capacity.html.j2").render(capacity=model, capacity_plots_url="capacity/")
    assert 'id="capacity-base-l2"' in html and "&gt;=6.00" in html and 'src="capacity/capacity.png"' in html
    assert "For mix base, off" in html and "not run: needs a GPU" in html
    assert env.get_template("sections/capacity.html.j2").render().strip() == ""  # no sweep configured: nothing


def test_the_sizing_answer_heads_the_reports_findings_with_the_servers_not_measured(study):
    model = capacity_model(study, SERVERS, {"z": {"adapters": ["a", "b"], "assignment": "zipf"}})
    base, z = capacity_findings(model)
    assert (
        base["question"]
        == "which configuration serves the most within p99 TTFT <= 100 ms and p99 ITL <= 20 ms, mix base?"
    )
    assert base["answer"].startswith("For mix base, off (vllm, LoRA off) serves the most")
    assert base["answer"].endswith(" Not measured: sg-off.") and z["answer"].endswith(" Not measured: sg-off.")
    assert capacity_findings(None) == [] and capacity_findings({"mixes": []}) == []


def test_sweeps_of_two_machines_are_said_so_and_lora_costs_across_them_marked(study, tmp_path):
    for path, boot, at in ((study[0], "aaaa1111-x", "2026-12-05T03:10:00Z"), (study[1], "aaaa1111-x",
                           "2026-12-05T03:20:00Z"), (study[2], "bbbb2222-y", "2026-12-06T09:00:00Z")):  # fmt: skip
        data = json.loads(path.read_text())
        path.write_text(json.dumps(data | {"ran": {"started_utc": at, "boot_id": boot}}))
    model = capacity_model(study, SERVERS)
    assert model["machines"] == [
        {"boot_id": "aaaa1111-x", "started_utc": "2026-12-05T03:10:00Z", "servers": ["off", "l2"]},
        {"boot_id": "bbbb2222-y", "started_utc": "2026-12-06T09:00:00Z", "servers": ["l4"]},
    ]
    rows = _rows(study)
    assert not rows[("base", "l2")].lora_cost_across_machines  # l2 and off: one machine
    assert rows[("z", "l2")].lora_cost_pct < 0 and not rows[("z", "l2")].lora_cost_across_machines
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "report" / "templates"), autoescape=True)
    html = env.get_template("sections/capacity.html.j2").render(capacity=model)
    assert "ran on 2 machines" in html and "l4 from 2026-12-06T09:00:00Z (boot bbbb2222)" in html
    # the 4-slot sweep measured against LoRA off of another machine: its cost says so
    data = json.loads(study[2].read_text())
    data["sweeps"] = [sweep("l4", "base", [[20, 60, 150]] * SIX)]
    data["mixes"] = ["base"]
    study[2].write_text(json.dumps(data))
    l4 = _rows(study)[("base", "l4")]
    assert l4.lora_reference == "off/base" and l4.lora_cost_across_machines
    (row,) = [r for r in capacity_model(study, SERVERS)["mixes"][0]["rows"] if r["server"] == "l4"]
    assert row["lora_cost"].endswith(", the two sweeps on different machines")
    # and the sizing sentence, which ranks l4 against sweeps of the other machine, says so twice
    (base, _) = sizing_findings(list(_rows(study).values()), SERVERS, SLO)
    assert "but the two sweeps ran on different machines, which the intervals do not cover" in base
    assert base.endswith(", the two sweeps on different machines).")
    assert capacity_model(study[:2], SERVERS)["machines"] == []  # one machine: nothing to say


def test_sweeps_with_different_slos_are_refused(study, tmp_path):
    other = write_sweep(tmp_path / "o", "l4", [sweep("l4", "z", [[20, 30, 40]])])
    data = json.loads(other.read_text())
    data["slo"]["ttft_p99_ms"] = 999
    other.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="different SLOs"):
        capacity_model([study[0], other], SERVERS)


def test_the_report_shows_the_capacity_section_with_its_plots_beside_it(study, tmp_path):
    import yaml

    from lorabench.claims import evaluate_file
    from lorabench.report import render_report
    from lorabench.report_model import ReportInputs

    from .conftest import FIXTURES

    run = FIXTURES / "cpu-run"
    cap_dir = tmp_path / "capacity"
    cap_dir.mkdir()
    model = capacity_model(study, SERVERS, {"z": {"adapters": ["a", "b"], "assignment": "zipf"}}, cap_dir / "plots")
    (cap_dir / "capacity.json").write_text(json.dumps(model))
    adapters = [str(run / f"adapter-{a}.json") for a in "abc"]
    verdicts = tmp_path / "verdicts.json"
    evaluate_file(str(ROOT / "config/claims.yaml"), str(run / "summary.json"), str(run / "model.json"), adapters,
                  str(verdicts), str(ROOT / "config/models/qwen3-1.7b.json"))  # fmt: skip
    html = tmp_path / "report" / "index.html"
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    inputs = ReportInputs.read("fixture", config, str(run / "summary.json"), str(verdicts), str(run / "model.json"),
                               adapters, [], capacity_path=str(cap_dir / "capacity.json"))  # fmt: skip
    render_report(inputs, html, tmp_path / "report/provenance.json", ROOT / "report/templates", ROOT)
    text = html.read_text()
    assert 'id="capacity"' in text and 'id="capacity-base-l2"' in text and "For mix base, off" in text
    assert 'src="capacity-capacity.png"' in text and (html.parent / "capacity-capacity.png").stat().st_size > 1000
    assert all((html.parent / f"capacity-{f}").exists() for m in model["plots"]["latency"].values() for f in m.values())


def test_an_interval_end_on_a_censored_cycle_is_said_to_be_a_bound(tmp_path):
    """Five cycles place LoRA off's capacity; in the sixth every rate met (capacity above 6/s, the highest it ran):
    with six cycles the interval's top is that cycle's, so it reads ">=6.00", and the LoRA cost's lower end, computed
    from it, "<=". One cycle of 2 slots whose lowest rate failed sets the bottom of its interval the same way."""
    off_cycles = [[40, 70, 130]] * (SIX - 1) + [[20, 30, 40]]
    l2_cycles = [[40, 80, 180]] * (SIX - 1) + [[200, 300, 400]]
    paths = [
        write_sweep(tmp_path, "off", [sweep("off", "base", off_cycles)]),
        write_sweep(tmp_path, "l2", [sweep("l2", "base", l2_cycles)]),
    ]
    rows = {r.server: r for r in capacity_rows([SweepFile.read(p) for p in paths], SERVERS)}
    off, l2 = rows["off"], rows["l2"]
    assert (off.lo_open, off.hi_open, off.mark) == (False, True, "")
    assert (l2.lo_open, l2.hi_open) == (True, False)
    # l2's bottom over off's top: both open ends bound the cost's lower end; its upper end (l2's top over off's
    # bottom) is a value
    assert (l2.lora_cost_lo_open, l2.lora_cost_hi_open) == (True, False)
    model = capacity_model(paths, SERVERS)
    views = {r["server"]: r for m in model["mixes"] for r in m["rows"]}
    assert views["off"]["interval"] == "5.00 to >=6.00"
    assert views["l2"]["interval"] == "<2.00 to 4.40"
    assert "(<=" in views["l2"]["lora_cost"] and "to >=" not in views["l2"]["lora_cost"]
    # an interval whose order statistics fall on placed cycles keeps the plain form
    closed = write_sweep(tmp_path / "c", "off", [sweep("off", "base", [[40, 70, 130]] * SIX)])
    (row,) = capacity_rows([SweepFile.read(closed)], SERVERS)
    assert (row.lo_open, row.hi_open) == (False, False)


def test_the_front_ends_cpu_at_capacity_says_whose_capacity_it_is(tmp_path):
    """LoRA off meets the target up to 4/s, where its front end used 0.95 of a CPU: the sizing sentence says the
    figure is the front end's; 2 slots' front end used 0.5 there: no such remark. Sweeps without the record show
    nothing, and to_json leaves the field out."""
    fe = {2: 0.4, 4: 0.95, 6: 1.0}
    paths = [
        write_sweep(tmp_path, "off", [sweep("off", "base", [[40, 70, 130]] * SIX, front_end=fe)]),
        write_sweep(tmp_path, "l2", [sweep("l2", "base", [[40, 80, 180]] * SIX, front_end={2: 0.2, 4: 0.5, 6: 0.6})]),
        write_sweep(tmp_path, "l4", [sweep("l4", "z", [[20, 30, 40]] * SIX)]),
    ]
    model = capacity_model(paths, SERVERS, {})
    rows = {(r["raw"]["mix"], r["server"]): r for m in model["mixes"] for r in m["rows"]}
    assert rows[("base", "off")]["host"] == "front end 0.95 CPU (bound), GPU 80 % busy"
    assert rows[("base", "l2")]["host"] == "front end 0.50 CPU, GPU 80 % busy" and rows[("z", "l4")]["host"] == ""
    base = next(f for f in model["findings"] if f.startswith("For mix base"))
    assert "a figure of its HTTP front end, which kept 0.95 of one CPU busy" in base
    assert "front end" not in next(f for f in model["findings"] if f.startswith("For mix z"))
    assert "host" not in SweepResult.from_json(sweep("l4", "z", [[20, 30, 40]])).points[0].to_json()
