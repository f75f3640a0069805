"""config/README.md's key reference (tools/config_reference.py): every schema key there, never stale, its examples
a study that loads."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from lorabench.config import load_and_check

from .conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import config_reference as ref  # noqa: E402

README = ROOT / "config" / "README.md"


def _property_schemas(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(dotted path, schema) of every property of the schema, map entries included."""
    found = []
    for name, sub in node.get("properties", {}).items():
        found.append((f"{path}{name}", sub))
        found += _property_schemas(sub, f"{path}{name}.")
        entries = sub.get("additionalProperties")
        if isinstance(entries, dict):
            found += _property_schemas(entries, f"{path}{name}.NAME.")
    return found


def test_every_schema_key_is_in_the_readme():
    text = README.read_text()
    docs = ref.key_docs(ref.load_schema())
    assert len(docs) >= len(_property_schemas(ref.load_schema()))
    missing = [d.path for d in docs if f"| `{d.path}` |" not in text]
    assert not missing, f"config/README.md lacks {missing}: run .venv/bin/python tools/config_reference.py"


def test_the_readme_is_not_stale():
    assert ref.main(["--check"]) == 0, "config/README.md is stale: run .venv/bin/python tools/config_reference.py"


def test_a_new_schema_key_makes_the_readme_stale(tmp_path: Path):
    schema = copy.deepcopy(ref.load_schema())
    schema["properties"]["new_knob"] = {"type": "integer", "default": 3, "description": "A knob added later."}
    fresh = ref.render(README.read_text(), schema)
    assert fresh != README.read_text()
    assert "| `new_knob` | integer | `3` | A knob added later. |" in fresh  # under "Other keys" until placed
    stale = tmp_path / "README.md"
    stale.write_text(README.read_text().replace("| `load.shape` |", "| `load.kind` |"))
    assert ref.main(["--check"], readme=stale) == 1


def test_every_key_has_a_description():
    assert [d.path for d in ref.key_docs(ref.load_schema()) if not d.meaning] == []


def test_no_description_is_cut_at_a_comma():
    """An unquoted description in a YAML flow mapping ends at its first comma; the rest becomes a key without a
    value that the schema's validator ignores."""
    cut = [(p, k) for p, sub in _property_schemas(ref.load_schema()) for k, v in sub.items() if v is None]
    assert cut == []


def test_rendering_keeps_the_prose_around_the_reference():
    readme = f"# Title\n\nprose\n\n{ref.BEGIN}\nold table\n{ref.END}\n\nafter\n"
    out = ref.render(readme, ref.load_schema())
    assert out.startswith("# Title\n\nprose\n\n" + ref.BEGIN)
    assert out.endswith(f"{ref.END}\n\nafter\n")
    assert "old table" not in out and "| `servers.ID.engine` |" in out
    assert ref.render(out, ref.load_schema()) == out


def test_each_sections_example_stays_in_its_section():
    for section in ref.SECTIONS:
        keys = set(ref.yaml.safe_load(section.example))
        assert keys and keys <= set(section.keys), section.title


def test_the_examples_together_are_a_study_that_loads(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)  # the examples name files relative to the checkout, as a study does
    config = load_and_check(ref.examples())
    assert config["conditions"]["many"]["adapters"] == [f"m-{i:03d}" for i in range(8)]
    assert config["repetitions"] == 8 and config["outlier_fraction"] == 0.75  # given, and filled from the schema


def test_the_keys_that_moved_are_gone_their_replacements_exist_and_the_readme_lists_them():
    from lorabench.config import MOVED_KEYS

    keys = {d.path for d in ref.key_docs(ref.load_schema())}
    assert MOVED_KEYS and not [k for k in MOVED_KEYS if k in keys]
    assert [(k, r) for k, m in MOVED_KEYS.items() for r in m.replaced_by if r not in keys] == []
    text = README.read_text()
    assert "### Keys that moved" in text
    for key, moved in MOVED_KEYS.items():
        assert f"| `{key}` | replaced by {', '.join(f'`{r}`' for r in moved.replaced_by)}: {moved.why} |" in text
    assert "### Keys that moved" not in ref.reference(ref.load_schema(), moved={})
