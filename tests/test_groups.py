"""Co-resident server groups: what a config's ``groups:`` may not ask for stops it before any job runs
(lorabench.groups), each error naming the key, the servers and the numbers."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lorabench.code_inputs import import_closure
from lorabench.config import ConfigError
from lorabench.groups import check_groups, group_of, grouped_servers, plan_memory, solo_servers

from .conftest import ROOT
from .test_config import DEFAULT, check


def with_groups(groups: dict[str, Any], cfg: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg = check(copy.deepcopy(cfg or DEFAULT))
    cfg["groups"] = groups
    return cfg


def refused(cfg: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as e:
        check_groups(cfg)
    return str(e.value)


def gpu_config(**args: dict[str, Any]) -> dict[str, Any]:
    """The default config with vLLM and SGLang servers on GPU engines, each with the ``args`` given by id."""
    cfg = copy.deepcopy(DEFAULT)
    cfg["engines"]["vllm-gpu"] = {**cfg["engines"]["vllm-cpu"], "requires_gpu": True}
    for sid in ("lora-off", "lora-2", "lora-4"):
        cfg["servers"][sid]["engine"] = "vllm-gpu"
    for sid, a in args.items():
        cfg["servers"][sid]["args"] = {**cfg["servers"][sid].get("args", {}), **a}
    return cfg


def test_a_group_of_cpu_servers_passes_and_its_servers_leave_the_single_jobs():
    cfg = with_groups({"lora": {"servers": ["lora-off", "lora-2"]}})
    check_groups(cfg)
    assert group_of(cfg, "lora-2") == "lora" and group_of(cfg, "lora-4") is None
    assert grouped_servers(cfg) == ["lora-2", "lora-off"]
    assert solo_servers(cfg) == ["lora-4", "sglang-lora-2"]


def test_a_server_in_two_groups_is_refused():
    msg = refused(with_groups({"g1": {"servers": ["lora-off", "lora-2"]}, "g2": {"servers": ["lora-2", "lora-4"]}}))
    assert "groups.g2.servers" in msg and "lora-2 is in groups.g1 and groups.g2" in msg


def test_a_server_twice_in_one_group_is_refused():
    assert "twice in groups.g" in refused(with_groups({"g": {"servers": ["lora-2", "lora-2"]}}))


def test_an_unknown_server_is_refused():
    msg = refused(with_groups({"g": {"servers": ["lora-off", "lora-8"]}}))
    assert "groups.g.servers: no such server 'lora-8'" in msg


def test_a_group_of_one_server_is_refused():
    assert "groups.g.servers: a group needs at least two servers" in refused(
        with_groups({"g": {"servers": ["lora-2"]}})
    )


def test_a_group_mixing_a_gpu_engine_and_a_cpu_engine_is_refused():
    msg = refused(with_groups({"mixed": {"servers": ["lora-2", "sglang-lora-2"]}}))
    assert "groups.mixed: mixes engines that require a GPU (sglang-lora-2 (sglang-gpu))" in msg
    assert "that do not (lora-2 (vllm-cpu))" in msg


def test_several_starts_are_refused_with_groups():
    cfg = with_groups({"g": {"servers": ["lora-off", "lora-2"]}})
    cfg["server_starts"] = 2
    assert "server_starts: 2 with groups (g)" in refused(cfg)


def test_gpu_servers_must_give_their_memory_share():
    cfg = with_groups(
        {"g": {"servers": ["lora-off", "lora-2"]}}, gpu_config(**{"lora-off": {"gpu_memory_utilization": 0.4}})
    )
    assert "groups.g: servers.lora-2.args.gpu_memory_utilization must be given" in refused(cfg)


def test_vllm_shares_that_do_not_fit_one_gpu_are_refused_with_the_numbers():
    shares = {"lora-off": {"gpu_memory_utilization": 0.3}, "lora-2": {"gpu_memory_utilization": 0.4},
              "lora-4": {"gpu_memory_utilization": 0.35}}  # fmt: skip
    cfg = with_groups({"g": {"servers": ["lora-off", "lora-2", "lora-4"]}}, gpu_config(**shares))
    msg = refused(cfg)
    assert "groups.g: the servers' GPU memory shares add up to 1.05 of the GPU, above 1.0" in msg
    assert "lora-off 0.30 (gpu_memory_utilization 0.3), lora-2 0.40" in msg
    shares["lora-4"] = {"gpu_memory_utilization": 0.3}
    cfg = with_groups({"g": {"servers": ["lora-off", "lora-2", "lora-4"]}}, gpu_config(**shares))
    check_groups(cfg)
    assert [round(s.held_after, 2) for s in plan_memory(cfg, "g")] == [0.3, 0.7, 1.0]


def test_sglang_shares_are_cumulative_in_start_order():
    cfg = gpu_config(**{"lora-2": {"gpu_memory_utilization": 0.3}, "sglang-lora-2": {"mem_fraction_static": 0.25}})
    # SGLang's fraction counts the memory the vLLM server started before it holds: 0.25 is below its 0.3
    msg = refused(with_groups({"g": {"servers": ["lora-2", "sglang-lora-2"]}}, cfg))
    assert "servers.sglang-lora-2.args.mem_fraction_static = 0.25 counts the memory held by the servers" in msg
    assert "(lora-2: 0.30 of the GPU), so it must be above 0.30" in msg
    cfg["servers"]["sglang-lora-2"]["args"] = {"mem_fraction_static": 0.6}
    ok = with_groups({"g": {"servers": ["lora-2", "sglang-lora-2"]}}, cfg)
    check_groups(ok)
    assert [(s.server, round(s.own, 2)) for s in plan_memory(ok, "g")] == [("lora-2", 0.3), ("sglang-lora-2", 0.3)]
    # started the other way round, the SGLang server holds 0.6 and vLLM's 0.3 more is 0.9: it fits too
    check_groups(with_groups({"g": {"servers": ["sglang-lora-2", "lora-2"]}}, cfg))
    cfg["servers"]["lora-2"]["args"]["gpu_memory_utilization"] = 0.5
    msg = refused(with_groups({"g": {"servers": ["sglang-lora-2", "lora-2"]}}, cfg))
    assert "add up to 1.10 of the GPU" in msg


def test_editing_the_group_checks_reruns_no_measuring_job():
    """Like engine_limits: the rules' code inputs are their scripts' import closures."""
    for script in ("server_loadtest", "runtime_load", "prefix_cache", "rate_sweep"):
        files = import_closure(ROOT / "workflow" / "scripts" / f"{script}.py", ROOT / "workflow" / "lorabench")
        assert "groups.py" not in [f.name for f in files], script


def cell_row(server: str, condition: str, values: list[float], group: str | None = "g") -> dict[str, Any]:
    """A summary row as summary._cell_rows writes it, with its cycles' throughputs."""
    from lorabench.median import MedianInterval

    iv = MedianInterval.of(values)
    return {"server": server, "condition": condition, "burst": 4, "status": "ok", "group": group,
            "throughput_by_cycle": " ".join(f"0.{c}:{v}" for c, v in enumerate(values)),
            "throughput_median": iv.median, "throughput_ci_lo": iv.lo, "throughput_ci_hi": iv.hi}  # fmt: skip


def group_facts(*servers: str, group: str | None = "g") -> dict[str, Any]:
    from lorabench.facts import ServerFacts

    cfg = {"group": group, "group_servers": list(servers)} if group else {}
    return {s: ServerFacts(s, "vllm", "0.32.0", "ok", {"conditions": ["base"], **cfg}) for s in servers}


def test_cells_of_two_servers_of_one_group_pair_per_cycle_and_others_do_not():
    from lorabench.stats import paired_ratios, ratio_span
    from lorabench.summary import server_comparisons

    # a slow spell of the host in cycles 3-5 slows both servers alike: paired, it cancels
    off = [100, 101, 99, 70, 71, 69, 100, 102, 98, 100]
    on = [90.0 * v / 100 for v in off]
    assert len(paired_ratios(cell_row("on", "base", on), cell_row("off", "base", off))) == 10
    paired = ratio_span(cell_row("on", "base", on), cell_row("off", "base", off))
    unpaired = ratio_span(cell_row("on", "base", on, group=None), cell_row("off", "base", off, group=None))
    assert paired is not None and unpaired is not None
    assert paired == pytest.approx((-10, -10, -10))
    assert unpaired[2] - unpaired[1] > 20  # the two medians' intervals: the slow spell in both
    other = cell_row("off", "base", off, group="h")
    assert paired_ratios(cell_row("on", "base", on), other) == []
    rows = [cell_row("off", "base", off), cell_row("on", "base", on), cell_row("on", "a", on)]
    (row,) = server_comparisons(rows, group_facts("off", "on"))
    assert (row.server, row.reference_server, row.condition, row.paired_by, row.pairs) == (
        "on",
        "off",
        "base",
        "cycle (group)",
        10,
    )
    assert row.to_json()["halfwidth_points"] == pytest.approx(0)
    # too few shared cycles: the row says so and carries the unpaired span
    short = [cell_row("off", "base", off[:4]), cell_row("on", "base", on[:4])]
    (row,) = server_comparisons(short, group_facts("off", "on"))
    assert row.paired_by == "unpaired" and row.pairs == 0
    assert server_comparisons(rows, group_facts("off", "on", group=None)) == []


def test_a_groups_cycles_hold_every_cell_of_every_member_once_in_an_order_of_their_own():
    import asyncio

    from lorabench.group import GroupJob, group_progress, group_targets
    from lorabench.job import server_job
    from lorabench.measure.cycles import Cell, cycle_cells, run_cycles

    cfg = with_groups({"g": {"servers": ["lora-off", "lora-2"]}})
    cfg.update(repetitions=4, max_repetitions=4, bursts=[4])
    jobs = [server_job(cfg, s, "cpu") for s in ("lora-off", "lora-2")]
    group = GroupJob("g", jobs)
    assert GroupJob.from_json(group.to_json()).to_json() == group.to_json()
    cells = [Cell(c.condition, c.burst, c.stream, server=j.server_id)
             for j in jobs for c in cycle_cells(j.conditions, j.bursts, j.stream)]  # fmt: skip
    progress = group_progress(jobs)
    assert progress.references["lora-2:a"] == "lora-2:base" and progress.references["lora-off:base"] == "lora-off:base"
    sent: list[tuple[int, int, Cell]] = []

    async def burst(cell: Cell, cycle: int, pos: int, n: int) -> tuple[float, float]:
        sent.append((cycle, pos, cell))
        return 100.0, 0.01

    asyncio.run(run_cycles(burst, cells, progress, group_targets(jobs), 0, None, "both", seed=7))
    assert progress.cycles == 4 and len(cells) == 2 * (1 + 5)
    orders = [[c for cy, _, c in sent if cy == k] for k in range(4)]
    assert all(sorted(o) == sorted(cells) for o in orders)
    assert len({tuple(o) for o in orders}) == 4
    # the stop rule's comparisons: lora-2's conditions against its base, and its base against lora-off's (the
    # comparison between the two servers' reference cells)
    assert sorted((num[0], den[0]) for num, den, _ in progress.comparisons()) == [
        ("lora-2:a", "lora-2:base"), ("lora-2:ab", "lora-2:base"), ("lora-2:ab-base", "lora-2:base"),
        ("lora-2:abc", "lora-2:base"), ("lora-2:base", "lora-off:base")]  # fmt: skip


def test_two_servers_of_one_setup_are_an_aa_pair_read_against_one_point():
    from lorabench.facts import ServerFacts
    from lorabench.report_model import _group_answer
    from lorabench.summary import server_comparisons

    twin = [100, 101, 99, 70, 71, 69, 100, 102, 98, 100]
    rows = [
        cell_row("a1", "base", twin),
        cell_row("a2", "base", [v * (1.003, 0.997)[i % 2] for i, v in enumerate(twin)]),
    ]
    (row,) = server_comparisons(rows, group_facts("a1", "a2"))
    assert row.aa and row.aa_reading == "holds" and row.to_json()["aa_reading"] == "holds"
    assert "within ±1 point of 0: co-residence distorts nothing measurable here" in _group_answer([row])
    # the same pair 3 % apart in every cycle: co-resident servers measure apart on this machine
    rows[1] = cell_row("a2", "base", [v * 1.03 for v in twin])
    (row,) = server_comparisons(rows, group_facts("a1", "a2"))
    assert row.aa_reading == "distorts"
    assert "co-resident servers measure apart on this machine" in _group_answer([row])
    # holding 0 but ±5 points wide: no pass
    rows[1] = cell_row("a2", "base", [v * (1.05, 0.95)[i % 2] for i, v in enumerate(twin)])
    (row,) = server_comparisons(rows, group_facts("a1", "a2"))
    assert row.aa_reading == "too wide to confirm" and "too wide to confirm" in _group_answer([row])
    # another setup is no A/A pair, whatever its figures; a memory share alone does not make another setup
    facts = group_facts("a1", "a2")
    facts["a2"] = ServerFacts("a2", "vllm", "0.32.0", "ok", {**facts["a2"].config, "max_loras": 2})
    (row,) = server_comparisons(rows, facts)
    assert not row.aa and row.aa_reading is None and "A/A (" not in _group_answer([row])
    assert "group g has no A/A pair (two servers of one setup)" in _group_answer([row])
    pair = group_facts("a1", "a2")
    for s, share in (("a1", 0.3), ("a2", 0.6)):
        cfg = {**pair[s].config, "args": {"mem_fraction_static": share}}
        facts[s] = ServerFacts(s, "sglang", "0.5.17", "ok", cfg)
    (row,) = server_comparisons(rows, facts)
    assert row.aa


def test_a_group_that_cannot_fit_the_gpu_is_refused_with_the_numbers_before_any_server_starts():
    from lorabench.group import GroupJob, fit_problems
    from lorabench.groups import memory_shares

    shares = {"lora-off": {"gpu_memory_utilization": 0.3}, "lora-2": {"gpu_memory_utilization": 0.3}}
    cfg = with_groups({"g": {"servers": ["lora-off", "lora-2"]}}, gpu_config(**shares))
    assert memory_shares(cfg, "g") == {"lora-off": 0.3, "lora-2": 0.3}
    group = GroupJob("g", [], memory_shares(cfg, "g"))
    # an H100 (81,559 MiB) and the 8B shape's weights (15,622 MiB): each share of 24,468 MiB holds them
    assert fit_problems(group, 81559, 500, 15622) == []
    # another process holds 40 GiB: the shares no longer fit what is free
    (free,) = fit_problems(group, 81559, 40960, 15622)
    assert "ask for 48935 MiB of the GPU's 81559, but other processes hold 40960 MiB: 40599 MiB are free" in free
    # a 40 GB card: a share of 0.3 is less than the weights and what they need beside them
    problems = fit_problems(group, 40960, 500, 15622)
    assert len(problems) == 2 and problems[0].startswith("lora-off: a share of 0.3 is 12288 MiB, less than")
    assert "give it at least 0.46" in problems[0]
    assert memory_shares(with_groups({"c": {"servers": ["lora-off", "lora-2"]}}), "c") == {}


def test_the_reports_first_chart_marks_the_effects_paired_within_a_group():
    from lorabench.report_model import decision_effects
    from lorabench.summary import server_comparisons

    off = [100, 101, 99, 70, 71, 69, 100, 102, 98, 100]
    on = [v * 0.9 for v in off]
    rows = [{**cell_row("off", "base", off), "engine": "vllm", "lora": False},
            {**cell_row("on", "base", on), "engine": "vllm", "lora": True}]  # fmt: skip
    summary = {"server_comparisons": [c.to_json() for c in server_comparisons(rows, group_facts("off", "on"))]}
    ((label, mid, lo, hi, paired),) = decision_effects(rows, summary, "base")  # the pair once, not twice
    assert label == "LoRA on: on vs off, burst 4" and paired and mid == pytest.approx(-10) and lo == pytest.approx(-10)
    apart = [{**r, "group": None} for r in rows]
    ((_, mid, lo, hi, paired),) = decision_effects(apart, {}, "base")
    assert not paired and hi - lo > 20  # the same bursts unpaired: the slow spell in both medians' intervals


def test_a_comparison_of_too_few_cycles_to_pair_says_unpaired_not_cycle():
    """A study of fewer cycles than pairing needs (stats.MIN_PAIRED), as a new user's `repetitions: 3`: the span is
    the unpaired one, and the row says so."""
    from lorabench.report_model import _paired_answer
    from lorabench.summary import paired_comparisons

    rows = [cell_row("on", "base", [100, 98, 101], group=None), cell_row("on", "a", [90, 91, 89], group=None)]
    (c,) = paired_comparisons(rows, group_facts("on", group=None))
    assert (c.paired_by, c.pairs) == ("unpaired", 0)
    assert "1 unpaired (too few cycles pair" in _paired_answer([c]) and "paired by" not in _paired_answer([c])


def test_the_same_mix_again_within_a_server_is_an_aa_row_that_must_hold_0_within_the_target():
    from lorabench.report_model import _paired_answer
    from lorabench.summary import paired_comparisons

    base = [100, 101, 99, 70, 71, 69, 100, 102, 98, 100]
    from lorabench.facts import ServerFacts

    cfg = {"conditions": ["base", "base-aa"], "reference": "base"}
    facts = {"s": ServerFacts("s", "vllm", "0.32.0", "ok", cfg, measurement={"target_points": 1.5})}

    def rows(factors: tuple[float, float]) -> list[dict[str, Any]]:
        again = [v * factors[i % 2] for i, v in enumerate(base)]
        return [{**cell_row("s", "base", base, group=None), "adapters": "base"},
                {**cell_row("s", "base-aa", again, group=None), "adapters": "base"}]  # fmt: skip

    (c,) = paired_comparisons(rows((1.005, 0.995)), facts)
    assert c.aa and c.aa_reading == "holds" and c.to_json()["aa_reading"] == "holds"
    (c,) = paired_comparisons(rows((1.04, 0.96)), facts)
    assert c.aa_reading == "too wide to confirm" and "A/A (s base-aa vs base" in _paired_answer([c])
    (c,) = paired_comparisons(rows((1.03, 1.02)), facts)
    assert c.aa_reading == "distorts"
    other = [rows((1.0, 1.0))[0], {**rows((1.0, 1.0))[1], "adapters": "a"}]
    (c,) = paired_comparisons(other, facts)
    assert not c.aa and "aa" not in c.to_json()
