"""Lengths in tokens drawn from a named distribution, seeded: what a workload's prompt and output lengths follow.

A length is written in the config as an integer (fixed) or as ``{distribution: NAME, ...}``; the distributions
are a registry keyed by name, each with the parameters it needs:

- ``fixed``: ``value``;
- ``uniform``: ``min``, ``max`` (integers, both included);
- ``normal``: ``mean``, ``std``, ``min``, ``max``;
- ``lognormal``: ``sigma`` (of the logarithm) and either ``median`` or ``mean`` (of the lengths), ``min``, ``max``.

Normal and lognormal lengths are bounded: a draw is rounded to an integer and drawn again while it lies outside
``[min, max]`` (a truncated distribution, not one piled up at its bounds). Errors name the config key.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_TRIES = 10_000  # draws outside the bounds before the bounds are judged to hold almost none of the distribution

Draw = Callable[["Length", random.Random], int]
_DISTRIBUTIONS: dict[str, tuple[tuple[str, ...], Draw]] = {}


def distribution(name: str, *needs: str) -> Callable[[Draw], Draw]:
    """Register a distribution under ``name``, with the parameters it requires."""

    def deco(fn: Draw) -> Draw:
        if name in _DISTRIBUTIONS:
            raise ValueError(f"length distribution {name!r} registered twice")
        _DISTRIBUTIONS[name] = (needs, fn)
        return fn

    return deco


def distributions() -> list[str]:
    return sorted(_DISTRIBUTIONS)


@dataclass(frozen=True)
class Length:
    """A length distribution as the config gives it; ``key`` is where (for errors)."""

    distribution: str
    value: int | None = None
    min: int | None = None
    max: int | None = None
    mean: float | None = None
    std: float | None = None
    median: float | None = None
    sigma: float | None = None
    key: str = ""

    @classmethod
    def from_config(cls, spec: Any, key: str) -> Length:
        """An integer (fixed) or a ``{distribution: ...}`` mapping, checked: every parameter the distribution
        needs is there, and no other; bounds in order."""
        if isinstance(spec, bool) or not isinstance(spec, int | dict):
            raise ValueError(f"{key}: a length is an integer or {{distribution: ...}}, not {spec!r}")
        if isinstance(spec, int):
            spec = {"distribution": "fixed", "value": spec}
        spec = dict(spec)
        name = spec.pop("distribution", None)
        if name not in _DISTRIBUTIONS:
            raise ValueError(f"{key}.distribution: unknown {name!r}; known: {distributions()}")
        needs = _DISTRIBUTIONS[name][0]
        allowed = set(needs) | ({"mean", "median"} if name == "lognormal" else set())
        extra = sorted(set(spec) - allowed)
        if extra:
            raise ValueError(
                f"{key}: {', '.join(extra)} not a parameter of distribution {name} (it takes {sorted(allowed)})"
            )
        missing = [p for p in needs if p not in spec]
        if missing:
            raise ValueError(f"{key}: distribution {name} needs {', '.join(missing)}")
        if name == "lognormal" and ("mean" in spec) == ("median" in spec):
            raise ValueError(f"{key}: distribution lognormal needs exactly one of median and mean")
        length = cls(distribution=name, key=key, **spec)
        length._check()
        return length

    def _check(self) -> None:
        for p in ("value", "min", "max"):
            v = getattr(self, p)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{self.key}.{p}: a length in tokens is an integer of at least 1, not {v!r}")
        for p in ("mean", "median"):
            v = getattr(self, p)
            if v is not None and not v > 0:
                raise ValueError(f"{self.key}.{p}: must be positive, not {v!r}")
        for p in ("std", "sigma"):
            v = getattr(self, p)
            if v is not None and not v >= 0:
                raise ValueError(f"{self.key}.{p}: must not be negative, not {v!r}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"{self.key}: min ({self.min}) is above max ({self.max})")
        self.draw(random.Random(0), 1)  # bounds that hold (almost) none of the distribution fail here, named

    @property
    def upper(self) -> int:
        """The longest length a draw can give."""
        return int(_p(self.value if self.distribution == "fixed" else self.max))

    def draw(self, rng: random.Random, n: int) -> list[int]:
        """``n`` lengths, drawn in order from ``rng``."""
        fn = _DISTRIBUTIONS[self.distribution][1]
        return [fn(self, rng) for _ in range(n)]

    def describe(self) -> str:
        """The distribution in a few words, for the report: ``uniform 1024-4096``."""
        d = self.distribution
        if d == "fixed":
            return str(self.value)
        if d == "uniform":
            return f"uniform {self.min}-{self.max}"
        if d == "normal":
            return f"normal (mean {self.mean:g}, std {self.std:g}) in {self.min}-{self.max}"
        centre = f"median {self.median:g}" if self.median is not None else f"mean {self.mean:g}"
        return f"lognormal ({centre}, sigma {self.sigma:g}) in {self.min}-{self.max}"


def _p(v: float | None) -> float:
    """A parameter that ``Length.from_config`` made sure is there."""
    assert v is not None
    return float(v)


def _bounded(length: Length, rng: random.Random, sample: Callable[[], float]) -> int:
    lo, hi = int(_p(length.min)), int(_p(length.max))
    for _ in range(MAX_TRIES):
        n = round(sample())
        if lo <= n <= hi:
            return n
    raise ValueError(
        f"{length.key}: the bounds {lo}-{hi} hold almost none of the {length.distribution} distribution "
        f"({MAX_TRIES} draws outside them): widen them or move its centre"
    )


@distribution("fixed", "value")
def _fixed(length: Length, _rng: random.Random) -> int:
    return int(_p(length.value))


@distribution("uniform", "min", "max")
def _uniform(length: Length, rng: random.Random) -> int:
    return rng.randint(int(_p(length.min)), int(_p(length.max)))


@distribution("normal", "mean", "std", "min", "max")
def _normal(length: Length, rng: random.Random) -> int:
    return _bounded(length, rng, lambda: rng.gauss(_p(length.mean), _p(length.std)))


@distribution("lognormal", "sigma", "min", "max")
def _lognormal(length: Length, rng: random.Random) -> int:
    sigma = _p(length.sigma)
    if length.median is not None:  # median = exp(mu)
        mu = math.log(length.median)
    else:  # mean = exp(mu + sigma^2 / 2)
        mu = math.log(_p(length.mean)) - sigma**2 / 2
    return _bounded(length, rng, lambda: rng.lognormvariate(mu, sigma))
