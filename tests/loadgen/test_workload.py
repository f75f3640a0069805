from __future__ import annotations

from collections import Counter

from lorabench.loadgen.workload import build_request_set

WL = {"seed": 7, "prompt": "p", "max_tokens": 8, "temperature": 0.0, "ignore_eos": True}


def test_cycle_assignment_and_determinism():
    conds = {"ab": {"adapters": ["a", "b"]}, "abc": {"adapters": ["a", "b", "base"]}}
    rs = build_request_set(WL, conds, [4])
    assert [r["adapter"] for r in rs["sets"]["ab/4"]] == ["a", "b", "a", "b"]
    assert [r["adapter"] for r in rs["sets"]["abc/4"]] == ["a", "b", "base", "a"]
    assert rs == build_request_set(WL, conds, [4])
    assert rs["seed"] == 7


def test_weighted_and_zipf_are_seeded():
    conds = {
        "w": {"adapters": ["a", "b"], "assignment": "weighted", "weights": [9, 1]},
        "z": {"adapters": [f"x{i}" for i in range(50)], "assignment": "zipf", "zipf_s": 1.2},
    }
    rs = build_request_set(WL, conds, [400])
    w = Counter(r["adapter"] for r in rs["sets"]["w/400"])
    assert w["a"] > 3 * w["b"]
    z = Counter(r["adapter"] for r in rs["sets"]["z/400"])
    assert z["x0"] > z["x10"]
    assert rs == build_request_set(WL, conds, [400])
    assert build_request_set({**WL, "seed": 8}, conds, [400]) != rs
