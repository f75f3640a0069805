"""Engine metrics: scrape Prometheus text from /metrics while a measurement runs, keep the series we use."""

from __future__ import annotations

import asyncio
import re
import time
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from .engines import Engine

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEnaNInf]+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str, prefixes: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines():
        if not line or line[0] == "#" or not line.startswith(prefixes):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        rows.append({"name": m.group(1), "labels": labels, "value": value})
    return rows


# Connections a client must hold beyond its requests' for the sampler: a pool exactly as large as a burst holds its
# polls until the burst's first requests finish (a one-round burst of 48 on an H100: two polls, at 0.00 and 0.07 s,
# then none until it ended 1.5 s later), so queue depths read in flight would miss the burst's first round.
METRICS_CONNECTIONS = 1


class MetricsSampler:
    """Polls /metrics every ``interval_s`` in the background, the first time half an interval after ``start()``;
    ``stop()`` returns the samples. Its session needs ``METRICS_CONNECTIONS`` free beside the requests in flight."""

    def __init__(self, session: aiohttp.ClientSession, url: str, prefixes: tuple[str, ...], interval_s: float):
        self.session, self.url, self.prefixes, self.interval_s = session, url, prefixes, interval_s
        self.samples: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None

    async def scrape_once(self) -> None:
        """One sample now (between bursts: nothing is in flight, so the engine's HTTP front end is idle)."""
        if not self.prefixes:
            return
        t = time.time()
        try:
            async with self.session.get(self.url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                text = await r.text()
            for row in parse_prometheus(text, self.prefixes):
                row["t"] = t
                self.samples.append(row)
        except (aiohttp.ClientError, TimeoutError):
            pass

    async def _run(self) -> None:
        # The first poll half an interval in: one at the burst's start finds none of its requests scheduled yet,
        # so a burst shorter than the interval (slot-queues-cpu at a fast hour: 0.24 s against 0.25) would have
        # no poll in flight at all.
        await asyncio.sleep(self.interval_s / 2)
        while True:
            await self.scrape_once()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self.prefixes:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> list[dict[str, Any]]:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                # The poller's own cancellation ends here; the caller's (Ctrl-C cancels the main task, possibly
                # while it waits right here) must go on, or the interrupted run would carry on measuring.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
        return self.samples


def summarize_samples(samples: list[dict[str, Any]], engine: Engine | None = None) -> dict[str, Any]:
    """Max and mean of gauges per metric (labels folded; under the engine's neutral name where it has one), plus
    the LoRA adapters seen running and waiting."""
    out: dict[str, Any] = {}
    by_name: dict[str, dict[float, float]] = {}
    running_sets: set[str] = set()
    waiting_sets: set[str] = set()
    names = engine.metric_names if engine else {}
    for s in samples:
        name = s["name"]
        sets = engine.lora_sets(s) if engine else None
        if sets is not None:
            running_sets.update(x for x in sets[:1] if x)
            waiting_sets.update(x for x in sets[1:] if x)
            continue
        if "reason" in s["labels"]:
            name = f"{name}_{s['labels']['reason']}"
        # sum label variants (e.g. per engine) at one sampling time
        by_name.setdefault(name, {})
        by_name[name][s["t"]] = by_name[name].get(s["t"], 0.0) + s["value"]
    for name, series in by_name.items():
        vals = list(series.values())
        short = names.get(name) or name.split(":", 1)[-1]
        out[f"{short}_max"] = max(vals)
        out[f"{short}_mean"] = sum(vals) / len(vals)
    if running_sets or waiting_sets:
        out["lora_running_sets"] = sorted(running_sets)
        out["lora_waiting_sets"] = sorted(waiting_sets)
    out["samples"] = len({s["t"] for s in samples})
    return out
