"""ARCHITECTURE.md stays true: every module is listed, and the dependency rules hold."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("rsiframe", "operators")


def modules() -> list[Path]:
    return sorted(
        p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py") if p.name != "__init__.py"
    )


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_every_module_is_in_the_map() -> None:
    text = (REPO / "ARCHITECTURE.md").read_text()
    missing = [
        str(p.relative_to(REPO)) for p in modules() if f"`{p.relative_to(REPO)}`" not in text
    ]
    assert not missing, f"ARCHITECTURE.md does not list: {missing}"


def test_nothing_imports_the_cli() -> None:
    offenders = [
        p.name for p in modules() if p.name != "cli.py" and "rsiframe.cli" in imports_of(p)
    ]
    assert not offenders


def test_leaves_stay_leaves() -> None:
    leaves = {
        "surface.py",
        "gittree.py",
        "digest.py",
        "errors.py",
        "faults.py",
        "archive.py",
        "signing.py",
        "sandbox.py",
        "tasks.py",
        "keys.py",
        "mounts.py",
    }
    allowed = {
        "rsiframe",
        "rsiframe.surface",
        "rsiframe.digest",
        "rsiframe.errors",
        "rsiframe.faults",
        "rsiframe.keys",
    }
    for p in modules():
        if p.name in leaves and p.parent.name == "rsiframe":
            inner = {m for m in imports_of(p) if m.startswith("rsiframe")}
            assert inner <= allowed, f"{p.name} imports {inner - allowed}"


def test_operators_use_only_the_public_api() -> None:
    allowed = {"rsiframe.api", "rsiframe.sandbox", "rsiframe.shell"}
    for p in (REPO / "operators").glob("*.py"):
        inner = {m for m in imports_of(p) if m.startswith("rsiframe")}
        assert inner <= allowed, f"{p.name} imports {inner - allowed}"
