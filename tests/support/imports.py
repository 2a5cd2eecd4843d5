"""What rsiframe's modules import (lazy imports inside functions counted): the package
order ARCHITECTURE.md states, each module's imports and their closure. Read by the
architecture tests and by the test-layout check."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from tests.support.paths import REPO

#: where each installed top-level package lives in the source tree
FOLDERS = {"rsiframe": REPO / "rsiframe", "rsiframe.operators": REPO / "operators",
           "rsiframe.viewer": REPO / "viewer"}  # fmt: skip


def module_name(path: Path) -> str:
    for name, folder in sorted(FOLDERS.items(), key=lambda kv: -len(kv[0])):
        if path.is_relative_to(folder):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            return ".".join([name, *parts])
    raise ValueError(path)


@cache
def all_modules() -> dict[str, Path]:
    return {
        module_name(p): p
        for folder in FOLDERS.values()
        for p in sorted(folder.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def _resolve(name: str) -> str | None:
    """The module a dotted import name lands in (``rsiframe.a.b.X`` -> ``rsiframe.a.b``)."""
    mods = all_modules()
    while name and name not in mods:
        if "." not in name:
            return None
        name = name.rsplit(".", 1)[0]
    return name


def imports_of(path: Path) -> dict[str, int]:
    """rsiframe modules ``path`` imports, anywhere in it (functions and TYPE_CHECKING too),
    with the line of the first import of each."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for n in names:
            target = _resolve(n)
            if target and target != me and target != "rsiframe":
                out.setdefault(target, node.lineno)
    return out


def order() -> list[str]:
    text = (REPO / "ARCHITECTURE.md").read_text()
    m = re.search(r"<!-- order -->\s*```\s*\n(.+?)\n```", text, re.S)
    assert m, "ARCHITECTURE.md has no package order block"
    return m.group(1).split()


def unit(module: str) -> str | None:
    """The unit of the order a module belongs to: its package, or a top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def closure(paths: list[Path]) -> set[str]:
    """Every rsiframe module reachable from ``paths`` through imports (transitively)."""
    mods = all_modules()
    seen: set[str] = set()
    todo = [m for p in paths for m in imports_of(p)]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(set(imports_of(mods[m])) - seen)
    return seen
