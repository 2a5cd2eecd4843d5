"""The runs table fits the screen: widths from content, the least useful column (the run
folder's name, then the budget's details, then the grid label) cut first, so state, recipe
and dates stay whole."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from rich.text import Text

from rsiframe.viewer.widgets.runs_table import MIN_WIDTH, fit_widths, fitted
from tests.support.grid import Grid


def test_widths_are_the_content_when_it_fits() -> None:
    natural = {"run": 40, "recipe": 20, "state": 16}
    assert fit_widths(natural, 200, 2) == natural


def test_the_run_name_is_cut_first_then_the_budget_then_the_grid() -> None:
    natural = {"grid": 30, "run": 50, "recipe": 30, "state": 16, "started": 16, "ended": 16}
    need = sum(natural.values()) + 2 * len(natural)
    widths = fit_widths(natural, need - 20, 2)
    assert widths == {**natural, "run": 30}
    widths = fit_widths(natural, need - 60, 2)
    assert widths["run"] == MIN_WIDTH and widths["grid"] == 30 - (60 - (50 - MIN_WIDTH))
    with_budget = fit_widths({**natural, "budget": 20}, need + 22 - 60, 2)
    assert with_budget["budget"] == MIN_WIDTH and with_budget["grid"] == 30 - (60 - 40 - 10)
    assert {k: widths[k] for k in ("recipe", "state", "started", "ended")} == {
        "recipe": 30,
        "state": 16,
        "started": 16,
        "ended": 16,
    }


def test_a_cut_cell_ends_in_an_ellipsis() -> None:
    assert str(fitted(Text("sat3-quickstart.select=best-r0-20261201T000000Z"), 12)) == (
        "sat3-quicks…"
    )
    assert str(fitted(Text("finished"), 12)) == "finished"


def test_a_grid_at_160_columns_keeps_state_recipe_and_dates_whole(
    grid: Grid, tmp_path: Path
) -> None:
    from textual.widgets import DataTable

    from rsiframe.viewer.app import ViewerApp
    from rsiframe.viewer.screens.runs import RunsScreen
    from rsiframe.viewer.widgets.runs_table import RunsTable

    archive = tmp_path / "archive"
    # a long grid folder name, as a real ablation's is
    shutil.copytree(grid.root, archive / "grid-of-selection-operators-on-sat3", symlinks=True)

    async def drive() -> None:
        app = ViewerApp(archive)
        async with app.run_test(size=(160, 40)) as pilot:
            for _ in range(100):
                await pilot.pause(0.05)
                if isinstance(app.screen, RunsScreen) and app.screen.is_ready():
                    break
            await pilot.pause(0.2)
            table = app.screen.query_one(RunsTable)
            assert isinstance(table, DataTable) and table.row_count == 4
            natural = {c: max(r[c].cell_len for r in table.cells.values()) for c in table.keys}
            assert sum(natural.values()) + 2 * len(natural) > 160, natural  # too wide whole
            assert sum(table.widths.values()) + 2 * len(table.widths) <= 158, table.widths
            for col in ("state", "recipe", "started", "ended"):
                assert table.widths[col] >= natural[col], (col, table.widths)
            for i in range(table.row_count):
                row = dict(zip(table.keys, table.get_row_at(i), strict=True))
                for col in ("state", "recipe", "started", "ended"):
                    assert "…" not in str(row[col]), (col, str(row[col]))
            await pilot.press("q")

    asyncio.run(drive())
