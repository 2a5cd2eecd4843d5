"""Snapshots of the viewer's main screens, on a deterministic synthetic run (fixed key,
fixed clock, fixed seed: see bench/viewer.py), at fixed terminal sizes.

Update after an intended change with ``pytest tests/viewer/test_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rsiframe.viewer.app import ViewerApp
from tests.support.viewer import bench_module, plain, ready


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("snap")
    return bench_module().build_run(root / "run", 40, per_generation=4)


def test_run_screen_80x24(snap_compare, synthetic: Path) -> None:
    assert snap_compare(ViewerApp(synthetic), terminal_size=(80, 24), run_before=ready)


def test_run_screen_200x50(snap_compare, synthetic: Path) -> None:
    assert snap_compare(ViewerApp(synthetic), terminal_size=(200, 50), run_before=ready)


def test_lineage_screen(snap_compare, synthetic: Path) -> None:
    async def lineage(pilot) -> None:
        await ready(pilot)
        await pilot.press("l")
        await ready(pilot)

    assert snap_compare(ViewerApp(synthetic), terminal_size=(100, 30), run_before=lineage)


def test_candidate_screen(snap_compare, synthetic: Path) -> None:
    async def candidate(pilot) -> None:
        await ready(pilot)
        await pilot.press("c", "enter")
        await ready(pilot)

    assert snap_compare(ViewerApp(synthetic), terminal_size=(100, 30), run_before=candidate)


def test_rejected_and_failed_candidates_show_why(synthetic: Path) -> None:
    """Guardrail violations, validate output and evaluation failures are on screen."""
    from rsiframe.viewer.screens.candidate import CandidateScreen
    from rsiframe.viewer.source import RunSource
    from rsiframe.viewer.widgets.diff_view import DiffView
    from rsiframe.viewer.widgets.notes_view import NotesView

    src = RunSource(synthetic)
    src.read_all()
    rows = src.rows()
    guard = next(r.id for r in rows if r.decision.startswith("guardrail"))
    validate = next(r.id for r in rows if r.decision.startswith("validate"))
    failed = next(r.id for r in rows if r.state == "failed")

    async def notes_of(app: ViewerApp, pilot, cid: str) -> str:
        table = app.screen.query_one("#candidates")
        assert table.move_to(cid)
        await pilot.press("enter")
        await ready(pilot)
        screen = app.screen
        assert isinstance(screen, CandidateScreen) and screen.cid == cid
        text = plain(screen.query_one(NotesView))
        await pilot.press("1")
        await ready(pilot)
        text += " ".join(plain(s) for s in screen.query_one(DiffView).query("Static"))
        await pilot.press("escape")
        await pilot.pause()
        return text

    async def drive() -> None:
        app = ViewerApp(synthetic)
        async with app.run_test(size=(120, 40)) as pilot:
            await ready(pilot)
            text = await notes_of(app, pilot, guard)
            assert "rejected at guardrail" in text
            assert "guardrail: outside the surface: agent.py" in text
            assert "+# cheat" in text  # the rejected tree is kept and diffed
            text = await notes_of(app, pilot, validate)
            assert "validate output" in text and "SyntaxError: bad input" in text
            text = await notes_of(app, pilot, failed)
            assert "evaluation gate #1 failed" in text and "OSError: disk full" in text

    asyncio.run(drive())


def test_synthetic_run_verifies(synthetic: Path) -> None:
    """The bench's run is a valid run folder: ``rsiframe verify`` finds no problem in it."""
    from rsiframe.audit.verify import verify

    report = verify(synthetic)
    assert report.ok and not report.problems, report.problems
