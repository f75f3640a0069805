"""tools/verdicts_side_by_side.py on two committed H200 studies' verdicts (a few claims of each:
tests/fixtures/studies/): one row per claim some study could judge."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, STUDIES

sys.path.insert(0, str(ROOT / "tools"))
import verdicts_side_by_side as vs  # noqa: E402


def test_each_study_has_a_column_and_judged_claims_a_row():
    lines = vs.table([STUDIES / "h200-8b", STUDIES / "h200-1.7b"])
    assert lines[0] == "| claim | claimed | h200-8b | h200-1.7b |"
    row = next(x for x in lines if x.startswith("| s3-b48-adapter-a |"))
    assert row.count("|") == 5 and "%" in row
    assert not any(x.startswith("| s2-base-params |") and "not comparable | not comparable" in x for x in lines)
    assert lines[-1].startswith("\nh200-1.7b: ")


def test_a_folder_without_verdicts_is_named(tmp_path: Path):
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "verdicts_side_by_side.py"), str(tmp_path)],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode != 0 and "verdicts.json" in out.stderr
    with pytest.raises(SystemExit):
        vs.load(tmp_path)
