"""The files an operator's code is made of: its package, found without running it.

An operator is more than the file defining its class: importing ``tpops.mutate`` runs
``tpops/__init__.py`` first, and the class may call helpers of ``tpops/util.py``. The
operator lock (:mod:`rsiframe.slots.identity`) hashes all of them:

* **local modules**: the defining file and every module it imports that lives in its own
  package (the top-level package of a ``module:Class`` or entry-point operator; the folder
  of a ``path/file.py:Class`` operator, and the package that folder belongs to), with the
  ``__init__.py`` of every package on the way, followed transitively. Imports are read from
  the source (``ast``), never executed, so an import inside a function counts too; one
  built at run time (``importlib.import_module(name)``) is not seen;
* **an installed distribution's files**: every file its ``RECORD`` lists (compiled
  caches aside), so an edit of an installed file is seen even where no import leads to it.

Modules outside the package (the standard library, rsiframe's API, other distributions)
are not part of the operator: a distribution is pinned by its name and version.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

#: the most files one operator's package may lock (a runaway RECORD is cut, not read whole)
MAX_FILES = 5000
#: the module name prefix a ``path/file.py:Class`` operator is loaded under (its own module)
USER_MODULE = "rsiframe_user_"


@dataclass(frozen=True)
class Root:
    """Where module names resolve to files: the package ``prefix`` lives at ``folder``
    (an empty prefix: bare module names of the folder, as a file operator's neighbours)."""

    prefix: tuple[str, ...]
    folder: Path


def module_roots(module: str) -> list[Root]:
    """The package an imported module belongs to: its top-level package (for rsiframe's
    own operators ``rsiframe.operators``, whose version rsiframe's pins)."""
    parts = module.split(".")
    depth = 2 if parts[0] == "rsiframe" and len(parts) > 2 else 1
    package = sys.modules.get(".".join(parts[:depth]))
    paths = list(getattr(package, "__path__", None) or [])
    return [Root(tuple(parts[:depth]), Path(p).resolve()) for p in paths]


def file_roots(path: Path) -> list[Root]:
    """A file operator's neighbours (bare names in its folder) and, when that folder is a
    package, the topmost package it belongs to."""
    folder = Path(path).resolve().parent
    roots = [Root((), folder)]
    top = folder
    while (top / "__init__.py").is_file() and (top.parent / "__init__.py").is_file():
        top = top.parent
    if (top / "__init__.py").is_file():
        roots.append(Root((top.name,), top))
    return roots


def local_modules(start: Path, module: tuple[str, ...], roots: list[Root]) -> set[Path]:
    """``start`` (the module ``module``) and every file of ``roots`` it imports, with the
    packages on the way, transitively."""
    todo = [(Path(start).resolve(), module), *resolve_name(module, roots)]
    seen: dict[Path, tuple[str, ...]] = {}
    while todo and len(seen) < MAX_FILES:
        path, name = todo.pop()
        if path in seen:
            continue
        seen[path] = name
        for imported in imports_of(path, name):
            todo += resolve_name(imported, roots)
    return set(seen)


def imports_of(path: Path, module: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every module name ``path`` imports (``from a import b`` also names ``a.b``, which
    may be a module); relative imports resolved against ``module``."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    package = module if path.name == "__init__.py" else module[:-1]
    names: list[tuple[str, ...]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [tuple(a.name.split(".")) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            if base is None:
                continue
            names.append(base)
            names += [(*base, a.name) for a in node.names if a.name != "*"]
    return names


def _from_base(node: ast.ImportFrom, package: tuple[str, ...]) -> tuple[str, ...] | None:
    module = tuple(node.module.split(".")) if node.module else ()
    if not node.level:
        return module
    up = node.level - 1
    if up > len(package):
        return None
    return (*package[: len(package) - up], *module)


def resolve_name(name: tuple[str, ...], roots: list[Root]) -> list[tuple[Path, tuple[str, ...]]]:
    """The files importing ``name`` runs within ``roots``: each package's ``__init__.py``
    on the way, then the module itself (none when it lies outside every root)."""
    found: list[tuple[Path, tuple[str, ...]]] = []
    for root in roots:
        n = len(root.prefix)
        if tuple(name[:n]) != root.prefix or (not name[n:] and not n):
            continue
        rest, folder = name[n:], root.folder
        for i in range(0 if n else 1, len(rest) + 1):  # bare names: no package of the folder
            init = folder.joinpath(*rest[:i], "__init__.py")
            if init.is_file():
                found.append((init.resolve(), (*root.prefix, *rest[:i])))
        if rest:
            plain = folder.joinpath(*rest[:-1], f"{rest[-1]}.py")
            if plain.is_file():
                found.append((plain.resolve(), tuple(name)))
    return found


def distribution_files(dist: metadata.Distribution) -> set[Path]:
    """The files an installed distribution's RECORD lists, compiled caches and RECORD aside."""
    out: set[Path] = set()
    for f in dist.files or []:
        if f.suffix == ".pyc" or "__pycache__" in f.parts or f.name == "RECORD":
            continue
        path = Path(str(dist.locate_file(f))).resolve()
        if path.is_file():
            out.add(path)
        if len(out) >= MAX_FILES:
            break
    return out
