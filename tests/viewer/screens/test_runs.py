"""The viewer's runs screen groups an ablation grid by operator."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.grid import Grid

# -- the viewer groups a grid ------------------------------------------------------------


def test_viewer_runs_screen_groups_the_grid_by_operator(grid: Grid, tmp_path: Path) -> None:
    import asyncio

    from textual.widgets import DataTable

    from rsiframe.viewer.app import ViewerApp
    from rsiframe.viewer.screens.runs import RunsScreen

    archive = tmp_path / "archive"  # a folder holding the grid: its runs are found inside it
    shutil.copytree(grid.root, archive / "grid", symlinks=True)

    async def drive() -> None:
        app = ViewerApp(archive)
        async with app.run_test(size=(200, 40)) as pilot:
            for _ in range(100):
                await pilot.pause(0.05)
                if isinstance(app.screen, RunsScreen) and app.screen.is_ready():
                    break
            table = app.screen.query_one(DataTable)
            assert table.row_count == 4
            rows = [str(table.get_row_at(i)[0]) for i in range(4)]
            assert rows == ["grid: select=best"] * 2 + ["grid: select=uniform"] * 2
            await pilot.press("q")

    asyncio.run(drive())
