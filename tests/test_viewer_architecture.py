"""The viewer's import rule (ARCHITECTURE.md): it imports rsiframe's read side only, and
nothing but the CLI imports it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: what the viewer may use of the mechanism: reading, folding, reporting
READ_SIDE = {
    "rsiframe.archive.log",
    "rsiframe.engine.budget",
    "rsiframe.repo.candidates",
    "rsiframe.util.digest",
    "rsiframe.errors",
    "rsiframe.repo.gittree",
    "rsiframe.study.gridspec",
    "rsiframe.archive.loader",
    "rsiframe.recipe.schema",
    "rsiframe.recipe.models",
    "rsiframe.recipe.executor",  # the recipe schema imports it (evaluator.executor)
    "rsiframe.api",
    "rsiframe.certs.records",
    "rsiframe.audit.report",
    "rsiframe.archive.runfolder",
    "rsiframe.certs.signing",
    "rsiframe.archive.state",
    "rsiframe.archive.snapshot",
}
#: what the read side may pull in below it (leaves); never the evaluator, builds,
#: serving, the sandbox, the engine or operator loading
BELOW_READ_SIDE = {
    "rsiframe.recipe.executor",  # the recipe schema's executor section (bottom layer)
    "rsiframe.archive.events",
    "rsiframe.util.faults",
    "rsiframe.certs.keys",
    "rsiframe.util.reaper",  # candidates prunes exports with it (a folder removal, not run state)
    "rsiframe.util.safefile",
    "rsiframe.surface",
}


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_viewer_imports_only_the_read_side() -> None:
    for p in (REPO / "viewer").rglob("*.py"):
        inner = {
            m
            for m in _imports(p)
            if m.startswith("rsiframe")
            and not m.startswith("rsiframe.viewer")
            and m not in {"rsiframe"}
        }
        modules = {m for m in inner if m in READ_SIDE or m.rsplit(".", 1)[0] in READ_SIDE}
        assert inner == modules, f"{p.relative_to(REPO)} imports {sorted(inner - modules)}"


def test_the_viewer_reaches_only_the_read_side_transitively() -> None:
    from test_architecture import closure

    reached = {
        m
        for m in closure(sorted((REPO / "viewer").rglob("*.py")))
        if not m.startswith("rsiframe.viewer")
    }
    assert reached <= READ_SIDE | BELOW_READ_SIDE, sorted(reached - READ_SIDE - BELOW_READ_SIDE)
    assert not reached & {
        "rsiframe.evaluators.local",
        "rsiframe.dth.build",
        "rsiframe.dth.serving",
        "rsiframe.sandbox.bwrap",
        "rsiframe.recipe.load",
        "rsiframe.engine.loop",
    }


def test_nothing_but_the_cli_imports_the_viewer() -> None:
    for pkg in ("rsiframe", "operators"):
        for p in (REPO / pkg).rglob("*.py"):
            if p.name == "cli.py":
                continue
            assert not any(m.startswith("rsiframe.viewer") for m in _imports(p)), p.name


def test_every_viewer_module_is_in_the_map() -> None:
    text = (REPO / "ARCHITECTURE.md").read_text()
    missing = [
        str(p.relative_to(REPO))
        for p in sorted((REPO / "viewer").rglob("*.py"))
        if p.name != "__init__.py" and f"`{p.relative_to(REPO)}`" not in text
    ]
    assert not missing, f"ARCHITECTURE.md does not list: {missing}"
