"""The viewer's import rule (ARCHITECTURE.md): it imports rsiframe's read side only (that
nothing but the CLI imports it is the package order's rule, tests/project/test_architecture.py)."""

from __future__ import annotations

from tests.support.paths import REPO

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
    "rsiframe.audit.evidence",
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
    "rsiframe.util.spares",  # ... or sets them aside to be written over (folders, not run state)
    "rsiframe.repo.exportdir",  # candidates writes exports with it (a folder, not run state)
    "rsiframe.util.safefile",
    "rsiframe.surface",
}


def test_viewer_imports_only_the_read_side() -> None:
    from tests.support.imports import imports_of

    for p in (REPO / "viewer").rglob("*.py"):
        inner = {m for m in imports_of(p) if not m.startswith("rsiframe.viewer")}
        assert inner <= READ_SIDE, f"{p.relative_to(REPO)} imports {sorted(inner - READ_SIDE)}"


def test_the_viewer_reaches_only_the_read_side_transitively() -> None:
    from tests.support.imports import closure

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
