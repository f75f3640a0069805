"""Workloads: what the requests of a condition ask for, prompt and output lengths.

The study's ``workload`` is the default workload (named ``default``); ``workloads: {NAME: {...}}`` adds named ones
and ``conditions.X.workload: NAME`` picks one for a condition. A workload gives its prompts as one text
(``prompt``), as lengths in tokens drawn from a distribution (``prompt_tokens``, lengths.py; the text is built to
that length with the study's tokenizer, prompts.py) or as a dataset file (``dataset``, dataset.py), and its output
lengths as one number (``max_tokens``) or a distribution (``output_tokens``); a dataset gives each request's output
length itself.

Every condition of a workload gets the same requests at a burst size (request i of a burst has the same prompt and
output length whatever adapter it names), so that two mixes of one workload differ only in their adapters. A
prompt plus its output must fit the context of every server measuring the condition (``context_limits``): what is
known from the config is checked when the config is loaded, prompts given as text when the request set is built.
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .dataset import DatasetEntry, DatasetError, load_dataset
from .lengths import Length
from .prompts import Prompt, TokenCounter, prompt_of_length

DEFAULT_WORKLOAD = "default"  # the name of the study's own ``workload``
PROMPT_KEYS = ("prompt", "prompt_tokens", "dataset")
OUTPUT_KEYS = ("max_tokens", "output_tokens")


class WorkloadError(ValueError):
    """A workload that cannot run; the message names the config key (and the dataset's line)."""


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload as the config gives it, checked."""

    name: str
    key: str  # where in the config: "workload" or "workloads.NAME"
    prompt: str | None = None
    prompt_tokens: Length | None = None
    dataset: str | None = None
    output: Length | None = None  # max_tokens (fixed) or output_tokens; None with a dataset
    description: str = ""

    @classmethod
    def from_config(cls, name: str, spec: dict[str, Any], key: str) -> WorkloadSpec:
        given = [k for k in PROMPT_KEYS if spec.get(k) is not None]
        if len(given) != 1:
            raise WorkloadError(
                f"{key}: give exactly one of prompt (one text), prompt_tokens (lengths in tokens) or dataset "
                f"(a JSONL file){'; given: ' + ', '.join(given) if given else ''}"
            )
        outs = [k for k in OUTPUT_KEYS if spec.get(k) is not None]
        if given == ["dataset"]:
            if outs:
                raise WorkloadError(f"{key}.{outs[0]}: a dataset gives each request's output length (output_tokens)")
            output = None
        elif len(outs) != 1:
            raise WorkloadError(f"{key}: give exactly one of max_tokens (one length) or output_tokens (a distribution)")
        else:
            output = _length(spec[outs[0]], f"{key}.{outs[0]}")
        return cls(
            name=name,
            key=key,
            prompt=spec.get("prompt"),
            prompt_tokens=_length(spec["prompt_tokens"], f"{key}.prompt_tokens") if "prompt_tokens" in given else None,
            dataset=spec.get("dataset"),
            output=output,
            description=spec.get("description", ""),
        )

    @property
    def needs_tokenizer(self) -> bool:
        """Whether building its prompts needs the study's tokenizer (lengths in tokens, or a dataset's texts)."""
        return self.prompt is None

    def entries(self) -> list[DatasetEntry]:
        if self.dataset is None:
            return []
        try:
            return load_dataset(self.dataset)
        except DatasetError as e:
            raise WorkloadError(f"{self.key}.dataset: {e}") from None

    def describe(self) -> str:
        """Its prompt and output lengths in a few words, for the report."""
        if self.dataset is not None:
            return f"dataset {Path(self.dataset).name}: prompt and output lengths of its lines"
        prompt = f"prompt {self.prompt_tokens.describe()} tokens" if self.prompt_tokens else "one fixed prompt"
        return f"{prompt}, output {self.output.describe() if self.output else '?'} tokens"

    def requests(self, n: int, seed: int, counter: TokenCounter | None) -> list[tuple[Prompt, int]]:
        """The first ``n`` requests of the workload (prompt, max_tokens): drawn with ``seed``, the same for every
        condition and burst size (a burst of b takes the first b)."""
        if self.needs_tokenizer and counter is None:
            raise WorkloadError(f"{self.key}: prompts of a length in tokens (or from a dataset) need the tokenizer")
        out: list[tuple[Prompt, int]] = []
        if self.dataset is not None:
            assert counter is not None
            entries = self.entries()
            rng = random.Random(f"{seed}/{self.name}/dataset")
            order: list[DatasetEntry] = []
            while len(order) < n:  # a seeded shuffle of the lines, taken in order (and again once used up)
                perm = entries[:]
                rng.shuffle(perm)
                order += perm
            for i, e in enumerate(order[:n]):
                where = e.where(self.dataset)
                if e.prompt is not None:
                    prompt = Prompt(e.prompt, counter.count(e.prompt), None, where)
                else:
                    p = prompt_of_length(counter, int(e.prompt_tokens or 0), _prompt_rng(seed, self.name, i))
                    prompt = Prompt(p.text, p.tokens, p.tokens_intended, where)
                out.append((prompt, e.output_tokens))
            return out
        assert self.output is not None
        outputs = self.output.draw(random.Random(f"{seed}/{self.name}/output_tokens"), n)
        if self.prompt is not None:
            fixed = Prompt(self.prompt, counter.count(self.prompt) if counter else None)
            return [(fixed, m) for m in outputs]
        assert self.prompt_tokens is not None and counter is not None
        lengths = self.prompt_tokens.draw(random.Random(f"{seed}/{self.name}/prompt_tokens"), n)
        return [
            (prompt_of_length(counter, length, _prompt_rng(seed, self.name, i)), m)
            for i, (length, m) in enumerate(zip(lengths, outputs, strict=True))
        ]


def _prompt_rng(seed: int, workload: str, i: int) -> random.Random:
    """The words of request i's prompt: its own, so that no two prompts share a prefix the engine could cache."""
    return random.Random(f"{seed}/{workload}/prompt/{i}")


def _length(spec: Any, key: str) -> Length:
    try:
        return Length.from_config(spec, key)
    except ValueError as e:
        raise WorkloadError(str(e)) from None


def workload_of(condition: dict[str, Any]) -> str:
    """The name of a condition's workload (``default``: the study's ``workload``)."""
    return str(condition.get("workload") or DEFAULT_WORKLOAD)


def workload_specs(workload: dict[str, Any], workloads: dict[str, Any] | None) -> dict[str, WorkloadSpec]:
    """The study's workloads by name: its own (``default``) and the named ones."""
    specs = {DEFAULT_WORKLOAD: WorkloadSpec.from_config(DEFAULT_WORKLOAD, workload, "workload")}
    for name, spec in sorted((workloads or {}).items()):
        if name == DEFAULT_WORKLOAD:
            raise WorkloadError(f"workloads.{name}: the name {DEFAULT_WORKLOAD!r} is the study's own workload")
        specs[name] = WorkloadSpec.from_config(name, spec, f"workloads.{name}")
    return specs


def needs_tokenizer(config: dict[str, Any]) -> bool:
    """Whether the study's request set is built with the model's tokenizer (an input of its rule)."""
    return any(s.needs_tokenizer for s in workload_specs(config["workload"], config.get("workloads")).values())


def dataset_files(config: dict[str, Any]) -> list[str]:
    """The dataset files the study's workloads read (inputs of the request set's rule)."""
    specs = workload_specs(config["workload"], config.get("workloads"))
    return sorted({s.dataset for s in specs.values() if s.dataset})


def _model_context(config: dict[str, Any]) -> tuple[int, str] | None:
    """The model's own context (``max_position_embeddings`` of its config.json) and where it was read."""
    model = config["model"]
    path = Path(model["architecture"]) if model.get("architecture") else Path(model.get("path") or "") / "config.json"
    try:
        n = json.loads(path.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return (int(n), f"max_position_embeddings of {path}") if isinstance(n, int) else None


def context_limits(config: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """Per condition, the smallest context (prompt plus output tokens) of the servers measuring it, and the key
    that sets it: the server's context flag (its engine's ``context_arg`` under ``args``), else the model's."""
    from ..engines import get_engine

    model = _model_context(config)
    out: dict[str, tuple[int, str]] = {}
    for sid, srv in sorted(config["servers"].items()):
        arg = get_engine(config["engines"][srv["engine"]]["kind"]).context_arg
        given = (srv.get("args") or {}).get(arg) if arg else None
        limit = (int(given), f"servers.{sid}.args.{arg}") if isinstance(given, int) else model
        if limit is None:
            continue
        for c in srv["conditions"]:
            if c not in out or limit[0] < out[c][0]:
                out[c] = limit
    return out


def check_workloads(config: dict[str, Any]) -> None:
    """Everything about the workloads the config alone can tell: each is well formed, each condition's exists,
    the datasets read, and the longest prompt (where its length is known before tokenizing) plus the longest
    output fits every server measuring the condition."""
    specs = workload_specs(config["workload"], config.get("workloads"))
    entries = {name: s.entries() for name, s in specs.items()}
    limits = context_limits(config)
    for cname, cond in sorted(config["conditions"].items()):
        name = workload_of(cond)
        if name not in specs:
            raise WorkloadError(f"conditions.{cname}.workload: unknown workload {name!r} (known: {sorted(specs)})")
        if cname not in limits:
            continue
        limit, where = limits[cname]
        spec = specs[name]
        if spec.prompt_tokens is not None and spec.output is not None:
            longest = spec.prompt_tokens.upper + spec.output.upper
            if longest > limit:
                raise WorkloadError(
                    f"{spec.key}.prompt_tokens: prompts up to {spec.prompt_tokens.upper} tokens plus outputs up to "
                    f"{spec.output.upper} do not fit the context of {limit} tokens ({where}) of condition {cname}"
                )
        for e in entries[name]:
            need = (e.prompt_tokens or 0) + e.output_tokens
            if need > limit:
                raise WorkloadError(
                    f"{spec.key}.dataset: {e.where(spec.dataset or '')}: prompt_tokens plus output_tokens ({need}) "
                    f"are longer than the context of {limit} tokens ({where}) of condition {cname}"
                )


def check_fits(
    spec: WorkloadSpec, requests: list[tuple[Prompt, int]], condition: str, limit: tuple[int, str] | None
) -> None:
    """Each request's prompt, as the tokenizer counts it, plus its output fits the condition's context."""
    if limit is None:
        return
    for prompt, max_tokens in requests:
        if prompt.tokens is not None and prompt.tokens + max_tokens > limit[0]:
            where = f" ({prompt.source})" if prompt.source else ""
            raise WorkloadError(
                f"{spec.key}: a prompt of {prompt.tokens} tokens{where} plus {max_tokens} output tokens is longer than "
                f"the context of {limit[0]} tokens ({limit[1]}) of condition {condition}"
            )


def length_stats(values: list[int | None]) -> dict[str, float | int] | None:
    """min, median, max of lengths (None where any is unknown)."""
    if not values or any(v is None for v in values):
        return None
    vals = [int(v) for v in values if v is not None]
    return {"min": min(vals), "median": statistics.median(vals), "max": max(vals)}
