"""Dataset files: the shipped fixture loads and is what tools/make_dataset.py makes from its seed; a bad file is
an error that names the file and the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lorabench.loadgen.dataset import DatasetError, load_dataset

from ..conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "chat-small.jsonl"


def test_fixture_loads_with_both_kinds_of_prompt():
    entries = load_dataset(FIXTURE)
    assert len(entries) == 40 and [e.line for e in entries] == list(range(1, 41))
    texts = [e for e in entries if e.prompt is not None]
    lengths = [e for e in entries if e.prompt_tokens is not None]
    assert len(texts) == 32 and len(lengths) == 8
    assert all(e.prompt.startswith("User: ") and e.prompt.endswith("Assistant:") for e in texts)  # type: ignore[union-attr]
    assert all(8 <= e.output_tokens <= 64 for e in entries)


def test_fixture_is_what_the_generator_makes(tmp_path: Path):
    import subprocess
    import sys

    out = tmp_path / "chat.jsonl"
    cmd = [sys.executable, str(ROOT / "tools" / "make_dataset.py"), "--seed", "7", "--lines", "40", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True)
    assert out.read_bytes() == FIXTURE.read_bytes()
    other = tmp_path / "other.jsonl"
    subprocess.run([*cmd[:3], "8", *cmd[4:-1], str(other)], check=True, capture_output=True)
    assert other.read_bytes() != FIXTURE.read_bytes()


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (['{"prompt": "hi", "output_tokens": 4}', "{not json"], ":2: not a JSON object"),
        (['{"prompt": "hi", "output_tokens": 4}', "", '{"prompt": "hi"}'], ":3: missing field 'output_tokens'"),
        (['{"output_tokens": 4}'], ":1: give exactly one of 'prompt' (text) or 'prompt_tokens'"),
        (['{"prompt": "x", "prompt_tokens": 5, "output_tokens": 4}'], ":1: give exactly one of"),
        (['{"prompt_tokens": 0, "output_tokens": 4}'], ":1: 'prompt_tokens' must be an integer of at least 1"),
        (['{"prompt": "hi", "output_tokens": "4"}'], ":1: 'output_tokens' must be an integer"),
        (['{"prompt": "", "output_tokens": 4}'], ":1: 'prompt' must be non-empty text"),
        (["[1, 2]"], ":1: not a JSON object but list"),
        ([""], ": no requests"),
    ],
)
def test_bad_lines_are_named(tmp_path: Path, lines: list[str], expected: str):
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError) as e:
        load_dataset(path)
    assert str(e.value).startswith(f"{path}{expected}"), str(e.value)


def test_missing_file_is_named(tmp_path: Path):
    with pytest.raises(DatasetError, match="nope.jsonl: dataset file not found"):
        load_dataset(tmp_path / "nope.jsonl")


def test_other_keys_are_kept_out(tmp_path: Path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": 3, "turns": 2, "prompt_tokens": 12, "output_tokens": 5}) + "\n")
    (e,) = load_dataset(path)
    assert (e.line, e.prompt, e.prompt_tokens, e.output_tokens) == (1, None, 12, 5)
