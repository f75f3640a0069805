"""The package modules a rule script runs, derived from its imports: the rules' ``code`` inputs.

Snakemake reruns a job whose inputs changed; listing a rule's modules by hand drifts from what its script really
imports (a module missing from the list is edited without a rerun, one listed needlessly reruns jobs that do not
run it). :func:`import_closure` reads the script and, transitively, every module of the package it imports, with
``ast`` (nothing is imported or executed), and returns their files.

What counts as an import of a package module:

- ``import lorabench.x.y``, ``from lorabench.x import y``, ``from .x import y``, ``from ..x import y``, and
  ``from . import y`` where ``y`` is a module: anywhere in a file, inside functions too (a lazy import runs
  when the function does), except under ``if TYPE_CHECKING:`` (never run);
- importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` too: they are in the closure;
- a package whose ``__init__`` loads its modules by listing them (``pkgutil.iter_modules``, as ``engines`` does
  for its plug-ins) brings every module in its folder.

Anything else dynamic (``importlib.import_module`` with a computed name elsewhere) is not seen: the package has
none besides the plug-in loading above.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "lorabench"


def _module_file(pkg_dir: Path, parts: tuple[str, ...]) -> Path | None:
    """The file of the package module ``parts`` (below the package), or None where it is no module."""
    base = pkg_dir.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if parts and base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _with_parents(parts: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Importing ``a.b.c`` runs the package ``()``, ``a``, ``a.b``, then ``a.b.c``."""
    return [parts[:i] for i in range(len(parts) + 1)]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (its ``else`` branch is kept)."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def imported_modules(path: Path, pkg_dir: Path, own: tuple[str, ...] | None = None) -> set[tuple[str, ...]]:
    """The package modules (as name parts below the package) that the file ``path`` imports directly, their
    parent packages included. ``own`` is the file's own module name (``None`` for a script outside the
    package, which has no relative imports)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_init = path.name == "__init__.py"
    here = own if own is None or is_init else own[:-1]  # the package relative imports start from
    found: set[tuple[str, ...]] = set()

    def add(parts: tuple[str, ...]) -> None:
        for p in _with_parents(parts):
            if _module_file(pkg_dir, p) is not None:
                found.add(p)

    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                head, *rest = alias.name.split(".")
                if head == PACKAGE:
                    add(tuple(rest))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                head, *rest = (node.module or "").split(".")
                if head != PACKAGE:
                    continue
                base = tuple(rest)
            else:
                if here is None or node.level - 1 > len(here):
                    continue
                tail = tuple(node.module.split(".")) if node.module else ()
                base = here[: len(here) - (node.level - 1)] + tail
            add(base)
            for alias in node.names:  # `from pkg import module`
                if _module_file(pkg_dir, (*base, alias.name)) is not None:
                    add((*base, alias.name))
        elif is_init and own is not None and isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("iter_modules", "walk_packages"):
                folder = pkg_dir.joinpath(*own)
                for sub in sorted(folder.glob("*.py")):
                    if sub.name != "__init__.py":
                        add((*own, sub.stem))
    return found


def import_closure(script: Path | str, pkg_dir: Path | str) -> list[Path]:
    """The files of every package module that ``script`` runs by importing, transitively, sorted. ``script`` is a
    file outside the package (a rule script) or a module inside ``pkg_dir`` (then its own file is included)."""
    script, pkg_dir = Path(script), Path(pkg_dir)
    own: tuple[str, ...] | None = None
    try:
        rel = script.resolve().relative_to(pkg_dir.resolve())
        own = rel.parent.parts if rel.name == "__init__.py" else (*rel.parent.parts, rel.stem)
    except ValueError:
        pass
    todo = list(imported_modules(script, pkg_dir, own))
    if own is not None:
        todo += _with_parents(own)
    seen: set[tuple[str, ...]] = set()
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        f = _module_file(pkg_dir, mod)
        if f is not None:
            todo += imported_modules(f, pkg_dir, mod)
    files = (_module_file(pkg_dir, m) for m in seen)
    return sorted(f for f in files if f is not None)
