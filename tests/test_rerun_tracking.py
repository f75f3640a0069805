"""Rerun tracking derived from imports: each rule's ``code`` inputs are its script's import closure
(lorabench.code_inputs), and the measuring jobs do not import the modules that only analyse, so editing one of
those never reruns a server job."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lorabench.code_inputs import import_closure

from .conftest import ROOT
from .test_pipeline_e2e import copy_repo, planned, snakemake

PKG = ROOT / "workflow" / "lorabench"
SCRIPTS = ROOT / "workflow" / "scripts"
# Modules that only analyse saved results: editing one must never rerun a job that measures.
ANALYSIS = (
    "summary",
    "report",
    "claims",
    "plots",
    "queues",
    "bundle",
    "provenance",
    "stats",
    "roles",
    "capacity",
    "sweep_plots",
)
# Rules that start a server; each runs workflow/scripts/RULE.py.
MEASURING = ("server_loadtest", "runtime_load", "prefix_cache", "rate_sweep")


def _names(files: list[Path], pkg: Path) -> set[str]:
    """Dotted module names below the package: ``loadtest``, ``engines.base``, ``engines`` for its __init__."""
    out = set()
    for f in files:
        rel = f.relative_to(pkg).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out.add(".".join(parts))
    return out


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


# --- the import-closure helper on a package made for the test -------------------------------------------------


@pytest.fixture
def toy(tmp_path: Path) -> Path:
    """A small ``lorabench`` package exercising every import form the helper follows (and some it must not)."""
    _write(
        tmp_path / "lorabench",
        {
            "__init__.py": '"""toy"""\n',
            "a.py": "from .b import f\nfrom . import c\nimport json\n",
            "b.py": "import lorabench.sub.deep\n\ndef f():\n    from .lazy import g\n    return g\n",
            "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .typing_only import T\n",
            "lazy.py": "from ..outside import x\n",  # a relative import beyond the package: ignored
            "typing_only.py": "",
            "cycle1.py": "from .cycle2 import y\n",
            "cycle2.py": "from .cycle1 import z\n",
            "unrelated.py": "",
            "sub/__init__.py": "",
            "sub/deep.py": "from ..plugins import registry\nfrom .sib import s\n",
            "sub/sib.py": "",
            "plugins/__init__.py": (
                "import importlib, pkgutil\nfrom .base import registry\n"
                "for m in pkgutil.iter_modules(__path__):\n    importlib.import_module(f'{__name__}.{m.name}')\n"
            ),
            "plugins/base.py": "registry = {}\n",
            "plugins/one.py": "from .base import registry\n",
            "plugins/two.py": "from lorabench.cycle1 import y\n",
        },
    )
    return tmp_path / "lorabench"


def test_closure_follows_every_import_form(toy: Path, tmp_path: Path):
    script = tmp_path / "script.py"
    script.write_text("import os\nfrom lorabench.a import thing\n")
    got = _names(import_closure(script, toy), toy)
    assert got == {
        "",  # the package itself runs first
        "a",
        "b",  # from .b import f
        "c",  # from . import c (a module, not a name)
        "lazy",  # imported inside a function: runs when it does
        "sub",  # import lorabench.sub.deep runs sub/__init__ too
        "sub.deep",
        "sub.sib",
        "plugins",  # from ..plugins import registry (relative, two levels)
        "plugins.base",
        "plugins.one",  # loaded by listing the plug-in package
        "plugins.two",
        "cycle1",  # through a plug-in, and a cycle ends
        "cycle2",
    }
    assert "typing_only" not in got and "unrelated" not in got


def test_closure_of_a_module_includes_itself_and_its_packages(toy: Path):
    assert _names(import_closure(toy / "sub" / "sib.py", toy), toy) == {"", "sub", "sub.sib"}
    assert _names(import_closure(toy / "cycle2.py", toy), toy) == {"", "cycle1", "cycle2"}


def test_closure_of_a_script_without_package_imports_is_empty(toy: Path, tmp_path: Path):
    script = tmp_path / "plain.py"
    script.write_text("import json\nfrom pathlib import Path\n")
    assert import_closure(script, toy) == []


# --- the real scripts ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_closure_covers_what_python_really_imports(script: str):
    """Importing what the script imports loads no package module outside its computed closure (the closure may
    hold more: imports inside functions that did not run)."""
    tree = ast.parse((SCRIPTS / script).read_text())
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    code = ast.unparse(ast.Module(body=imports, type_ignores=[]))
    code += "\nimport sys\nprint('\\n'.join(m for m in sys.modules if m == 'lorabench' or m.startswith('lorabench.')))"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "workflow"), "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    loaded = {m.removeprefix("lorabench").removeprefix(".") for m in out.split()}
    static = _names(import_closure(SCRIPTS / script, PKG), PKG)
    assert loaded, f"{script} imports no package module"
    assert loaded <= static, f"{script}: loaded but not in its code inputs: {sorted(loaded - static)}"


@pytest.mark.parametrize("rule", MEASURING)
def test_measuring_imports_no_analysis_module(rule: str):
    names = _names(import_closure(SCRIPTS / f"{rule}.py", PKG), PKG)
    assert {"session", "jobs"} <= names  # the closure is really computed
    assert not names & set(ANALYSIS), f"{rule} imports analysis modules {sorted(names & set(ANALYSIS))}"


def test_report_render_tracks_the_modules_its_script_imports():
    """The drift that hand-kept lists had: report.py imports summary and job, report_render listed neither."""
    assert {"report", "summary", "job", "plots", "provenance", "queues", "stats"} <= _names(
        import_closure(SCRIPTS / "report_render.py", PKG), PKG
    )


def test_every_rule_takes_its_code_from_its_script():
    """No rule lists modules by hand: each rule with a script has code=code_of(ITS SCRIPT)."""
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for m in re.finditer(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", smk.read_text(), re.S | re.M):
            script = re.search(r'script:\s*"\.\./scripts/([\w.]+)"', m.group(2))
            if script:
                assert f'code=code_of("{script.group(1)}")' in m.group(2), f"{smk.name}: rule {m.group(1)}"


# --- a dry run: touching every analysis module plans no server job -----------------------------------------------


def _fake_outputs(work: Path) -> None:
    """Every output of the default study, empty, made up to date without running anything: created, then given
    times in the order of the DAG by ``snakemake --touch``."""
    summary = snakemake(work, "-n", "--summary").stdout
    for line in summary.splitlines()[1:]:
        path = work / line.split("\t")[0]
        if "." in path.name:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        else:  # directory outputs: the model's weights, an adapter's folder
            path.mkdir(parents=True, exist_ok=True)
    snakemake(work, "--touch")


def _edit(module: Path) -> None:
    """A real edit: Snakemake records its inputs' checksums and reruns nothing for a file only touched."""
    with module.open("a") as f:
        f.write("\n# edited\n")


def test_editing_analysis_modules_plans_no_server_job(tmp_path: Path):
    work = copy_repo(tmp_path)
    _fake_outputs(work)
    assert planned(work) == {}  # (a dry run takes seconds: the edits below are later than every output)

    for name in ANALYSIS:
        _edit(work / "workflow" / "lorabench" / f"{name}.py")
    jobs = planned(work)
    assert {"summary_aggregate", "queues_summary", "claims_evaluate", "report_render", "bundle_archive"} <= set(jobs)
    assert not set(jobs) & set(MEASURING), jobs

    # the control: a measuring module edited does plan the server jobs
    _edit(work / "workflow" / "lorabench" / "median.py")
    assert "server_loadtest" in planned(work)
