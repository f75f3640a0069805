"""Requests taken from a dataset file the user gives: JSONL, one request a line.

Each line is an object with the request's prompt, as text (``prompt``) or as a length in tokens
(``prompt_tokens``: the prompt is then built to that length, prompts.py), and its output length
(``output_tokens``). Other keys (an id, a conversation's turn) are kept out of the request set. Errors name the file
and the line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


class DatasetError(ValueError):
    """A dataset file that cannot be used; the message names the file and the line."""


@dataclass(frozen=True)
class DatasetEntry:
    """One line of a dataset file: its prompt (text, or a length in tokens) and its output length."""

    line: int  # 1-based
    output_tokens: int
    prompt: str | None = None
    prompt_tokens: int | None = None

    def where(self, path: str | Path) -> str:
        return f"{path}:{self.line}"


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def load_dataset(path: str | Path) -> list[DatasetEntry]:
    """The dataset's lines, in order (blank lines skipped); at least one."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{p}: dataset file not found")
    out: list[DatasetEntry] = []
    for i, raw in enumerate(p.read_text().splitlines(), 1):
        if not raw.strip():
            continue
        where = f"{p}:{i}"
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{where}: not a JSON object ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: not a JSON object but {type(obj).__name__}")
        has_text, has_len = "prompt" in obj, "prompt_tokens" in obj
        if has_text == has_len:
            raise DatasetError(f"{where}: give exactly one of 'prompt' (text) or 'prompt_tokens' (a length in tokens)")
        if has_text and not (isinstance(obj["prompt"], str) and obj["prompt"].strip()):
            raise DatasetError(f"{where}: 'prompt' must be non-empty text")
        if has_len and not _positive_int(obj["prompt_tokens"]):
            raise DatasetError(
                f"{where}: 'prompt_tokens' must be an integer of at least 1, not {obj['prompt_tokens']!r}"
            )
        if "output_tokens" not in obj:
            raise DatasetError(f"{where}: missing field 'output_tokens' (the request's output length in tokens)")
        if not _positive_int(obj["output_tokens"]):
            raise DatasetError(
                f"{where}: 'output_tokens' must be an integer of at least 1, not {obj['output_tokens']!r}"
            )
        out.append(
            DatasetEntry(
                line=i,
                output_tokens=int(obj["output_tokens"]),
                prompt=obj["prompt"] if has_text else None,
                prompt_tokens=int(obj["prompt_tokens"]) if has_len else None,
            )
        )
    if not out:
        raise DatasetError(f"{p}: no requests (the file is empty)")
    return out
