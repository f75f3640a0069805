"""Prompt text of a given length in tokens, counted with the study's own tokenizer.

A prompt of N tokens is a deterministic, seeded sequence of plain words (those of the synthetic tokenizer's
corpus: one token a word there, and a word or two in any other tokenizer), cut at the most words whose count with
the model's tokenizer is at most N. The count is taken as the engine's completions endpoint counts a prompt
(special tokens such as a BOS included), so it matches the prompt tokens the server's usage reports. Every prompt
records the length asked for and the length it has.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..model import CORPUS_WORDS

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


class TokenCounter(Protocol):
    """What a prompt builder needs of a tokenizer: the number of tokens of a text."""

    def count(self, text: str) -> int: ...


class HfTokenizer:
    """The model folder's Hugging Face tokenizer (the synthetic model ships one; real weights have their own)."""

    def __init__(self, model_dir: str | Path) -> None:
        d = Path(model_dir)
        if not any((d / f).exists() for f in TOKENIZER_FILES):
            raise FileNotFoundError(
                f"{d}: the model folder has no tokenizer ({', '.join(TOKENIZER_FILES)}): prompts of a length in "
                "tokens need one"
            )
        from transformers import AutoTokenizer

        self.path = str(d)
        self._tok: Any = AutoTokenizer.from_pretrained(d)

    def count(self, text: str) -> int:
        return len(self._tok(text)["input_ids"])


@dataclass(frozen=True)
class Prompt:
    """One prompt of a request set's prompt table."""

    text: str
    tokens: int | None = None  # as the study's tokenizer counts it (None: not counted, a fixed text)
    tokens_intended: int | None = None  # the length asked for (None: the text was given)
    source: str = ""  # where a given text came from (a dataset's FILE:LINE)

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tokens": self.tokens,
            "tokens_intended": self.tokens_intended,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Prompt:
        return cls(d["text"], d.get("tokens"), d.get("tokens_intended"), d.get("source", ""))


def prompt_of_length(counter: TokenCounter, n: int, rng: random.Random) -> Prompt:
    """A prompt of ``n`` tokens (or, where no cut of whole words gives exactly ``n``, the longest below it; one
    word at least), its words drawn from ``rng``."""
    words = [rng.choice(CORPUS_WORDS) for _ in range(n + 8)]

    def count(k: int) -> int:
        return counter.count(" ".join(words[:k]))

    while count(len(words)) <= n and len(words) < 64 * (n + 8):
        words += [rng.choice(CORPUS_WORDS) for _ in range(len(words))]
    lo, hi = 1, len(words)  # the largest k with count(k) <= n lies in [lo, hi); count(hi) > n (or hi is all words)
    if count(len(words)) <= n:
        lo = hi = len(words)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(mid) <= n:
            lo = mid
        else:
            hi = mid
    text = " ".join(words[:lo])
    return Prompt(text, counter.count(text), n)
