"""Length distributions: every draw within its bounds, the same seed gives the same lengths, another seed others,
and a config that cannot be drawn from names its key."""

from __future__ import annotations

import random
import statistics

import pytest

from lorabench.loadgen.lengths import Length, distributions

SPECS = {
    "fixed": {"distribution": "fixed", "value": 16},
    "uniform": {"distribution": "uniform", "min": 1024, "max": 4096},
    "normal": {"distribution": "normal", "mean": 200, "std": 80, "min": 100, "max": 260},
    "lognormal-median": {"distribution": "lognormal", "median": 300, "sigma": 0.8, "min": 64, "max": 900},
    "lognormal-mean": {"distribution": "lognormal", "mean": 300, "sigma": 0.8, "min": 64, "max": 2000},
}


def draw(spec: object, seed: object, n: int = 2000) -> list[int]:
    return Length.from_config(spec, "workload.prompt_tokens").draw(random.Random(seed), n)


def test_every_distribution_is_covered():
    assert distributions() == ["fixed", "lognormal", "normal", "uniform"]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_bounds_are_honoured_and_the_seed_decides(name: str):
    spec = SPECS[name]
    values = draw(spec, 1)
    lo, hi = (spec["value"], spec["value"]) if name == "fixed" else (spec["min"], spec["max"])
    assert all(isinstance(v, int) and lo <= v <= hi for v in values)
    assert draw(spec, 1) == values
    if name != "fixed":
        assert draw(spec, 2) != values
        assert len(set(values)) > 50  # a distribution, not a few values


def test_a_bare_integer_is_a_fixed_length():
    assert draw(32, 0, 5) == [32] * 5
    assert Length.from_config(32, "k").upper == 32 and Length.from_config(SPECS["uniform"], "k").upper == 4096


def test_bounded_draws_are_truncated_not_piled_at_the_bounds():
    # normal(200, 80) cut to [100, 260]: a clipped draw would put ~23 % of the lengths on 260 exactly
    values = draw(SPECS["normal"], 3, 5000)
    assert values.count(260) < 0.02 * len(values) and values.count(100) < 0.02 * len(values)
    assert 170 < statistics.median(values) < 210


def test_lognormal_median_and_mean_mean_what_they_say():
    assert statistics.median(draw(SPECS["lognormal-median"], 4, 5000)) == pytest.approx(300, rel=0.08)
    wide = {"distribution": "lognormal", "mean": 300, "sigma": 0.5, "min": 1, "max": 100000}
    assert statistics.mean(draw(wide, 5, 20000)) == pytest.approx(300, rel=0.05)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"distribution": "uniform", "min": 10}, "distribution uniform needs max"),
        ({"distribution": "uniform", "min": 10, "max": 5}, "workload.prompt_tokens: min (10) is above max (5)"),
        ({"distribution": "normal", "mean": 5, "std": 1, "min": 1, "max": 9, "sigma": 1}, "sigma not a parameter"),
        ({"distribution": "lognormal", "sigma": 1, "min": 1, "max": 9}, "needs exactly one of median and mean"),
        ({"distribution": "poisson", "value": 3}, "workload.prompt_tokens.distribution: unknown 'poisson'"),
        ({"distribution": "fixed", "value": 0}, "workload.prompt_tokens.value: a length in tokens"),
        ({"distribution": "normal", "mean": 10, "std": 1, "min": 500, "max": 600}, "hold almost none"),
        ("long", "a length is an integer or"),
    ],
)
def test_bad_lengths_name_the_key(spec: object, expected: str):
    with pytest.raises(ValueError) as e:
        Length.from_config(spec, "workload.prompt_tokens")
    assert expected in str(e.value) and str(e.value).startswith("workload.prompt_tokens")
