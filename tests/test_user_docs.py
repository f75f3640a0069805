"""The user-facing text (README.md, docs/, config/ and the study READMEs) is for people running lorabench on their
own machines: findings, conditions, intervals and the machine. How the project's own lent GPU machines were borrowed
(loans, engine kits, the sibling ``../shared`` folder, scratch paths under /tmp or /opt, issue numbers) belongs in
dev/ (dev/README.md, dev/studies-notes.md), so none of it may appear here."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import ROOT

FORBIDDEN = {
    "../shared": re.compile(r"\.\./shared"),
    "/tmp": re.compile(r"/tmp\b"),
    "/opt": re.compile(r"/opt\b"),
    "loan": re.compile(r"\bloans?\b", re.IGNORECASE),
    "kit": re.compile(r"\bkits?\b", re.IGNORECASE),
    "issue N": re.compile(r"\bissue \d+", re.IGNORECASE),
}


def user_files(root: Path = ROOT) -> list[Path]:
    """README.md, every markdown file under docs/, every file under config/ and every study's README.md."""
    files = [root / "README.md"]
    files += (root / "docs").rglob("*.md")
    files += (p for p in (root / "config").rglob("*") if p.is_file())
    files += (root / "studies").rglob("README.md")
    return sorted({p for p in files if p.is_file()})


def hits(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: [what] the line`` for each forbidden string in the file (binary files have none)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return []
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in FORBIDDEN.items():
            if pattern.search(line):
                found.append(f"{path.relative_to(root)}:{number}: [{what}] {line.strip()[:120]}")
    return found


def test_the_patterns_spare_ordinary_words():
    ordinary = ["the kitchen sink", "a toolkit", "kite", "loaner", "reissue 4", "issues 4", "/tmpfs", "/optimal"]
    assert [x for x in ordinary if any(p.search(x) for p in FORBIDDEN.values())] == []
    for line in ["../shared/gpu", "under /tmp", "/opt/x", "Loan 21", "two loans", "the kits", "a KIT", "Issue 70"]:
        assert any(p.search(line) for p in FORBIDDEN.values()), line


def test_a_hit_names_its_file_and_line(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text("fine\nmeasured in loan 6, kit staged\n")
    (tmp_path / "README.md").write_text("nothing here\n")
    found = [h for p in user_files(tmp_path) for h in hits(p, tmp_path)]
    assert [h.split(" ", 2)[:2] for h in found] == [["docs/x.md:2:", "[loan]"], ["docs/x.md:2:", "[kit]"]]


def test_the_user_files_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in user_files()}
    assert {"README.md", "docs/studies.md", "config/README.md", "studies/cpu-default/README.md"} <= names


def test_user_docs_say_nothing_of_how_the_machines_were_lent():
    found = [h for p in user_files() for h in hits(p)]
    assert not found, "move these to dev/ notes (dev/studies-notes.md):\n" + "\n".join(found)


def test_every_study_folder_a_user_doc_names_exists():
    """A command a user copies from the docs (``--from studies/X``, ``FROM=studies/X``) names committed studies:
    docs/gpu.md once named a folder gone since (``studies/h200-both``) and its command failed."""
    missing = []
    for path in user_files():
        if path.suffix != ".md" or "studies" in path.relative_to(ROOT).parts[:1]:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for m in re.finditer(r"""(?:FROM=["']?|--from )((?:studies/[\w.-]+/?\s*)+)""", line):
                missing += [f"{path.relative_to(ROOT)}:{number}: {s}" for s in m.group(1).split()
                            if not (ROOT / s).is_dir()]  # fmt: skip
    assert missing == []
