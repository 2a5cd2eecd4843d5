"""The run screen: header, recipe summary, score plot and the candidates table."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer

from rsiframe.viewer.messages import RunUpdated
from rsiframe.viewer.source import RUN, RunSource
from rsiframe.viewer.widgets.candidates_table import CandidatesTable
from rsiframe.viewer.widgets.filter_bar import FilterBar
from rsiframe.viewer.widgets.recipe_summary import RecipeSummary
from rsiframe.viewer.widgets.run_header import RunHeader
from rsiframe.viewer.widgets.score_plot import ScorePlot, series_of

PLOT_EVERY = 1.0  # seconds between header and plot redraws while a large run loads


class RunScreen(Screen):
    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("l", "lineage", "Lineage"),
        Binding("d", "recipe_diff", "Recipes"),
        Binding("c", "champion", "Champion"),
        Binding("o", "toggle_overview", "Overview"),
        Binding("escape", "back", "Back", show=False),
    ]

    def __init__(self, source: RunSource) -> None:
        super().__init__()
        self.source = source
        self._plotted = 0.0

    def compose(self) -> ComposeResult:
        yield RunHeader(self.source, id="run-header")
        with Horizontal(id="overview"):
            yield RecipeSummary(self.source.recipe, self.source.recipe_source, id="recipe")
            yield ScorePlot(id="plot")
        yield FilterBar(id="filter")
        yield CandidatesTable(self.source, id="candidates")
        yield Footer()

    @property
    def table(self) -> CandidatesTable:
        return self.query_one(CandidatesTable)

    def on_mount(self) -> None:
        self.table.focus()
        if self.source.state.candidates:
            self.run_updated(RunUpdated(self.source, set(self.source.state.candidates), True))
        self.app.ensure_loading(self.source)  # type: ignore[attr-defined]  # ViewerApp's (app.py imports this)

    def is_ready(self) -> bool:
        """Everything is read (or reading stopped at a broken archive)."""
        busy = self.app.busy(self.source)  # type: ignore[attr-defined]  # ViewerApp's (app.py imports this)
        return (self.source.loaded or self.source.error is not None) and not busy

    def run_updated(self, msg: RunUpdated) -> None:
        if msg.source is not self.source:
            return
        table = self.table
        table.upsert(self.source.rows(msg.changed - {RUN}))
        now = time.monotonic()
        if msg.done or now - self._plotted >= PLOT_EVERY:  # O(candidates): not every chunk
            self._plotted = now
            champ = self.source.champion_id()
            if champ != table.champion:
                table.champion = champ
                table.refresh()
            self.query_one(RunHeader).refresh_run()
            plot = self.query_one(ScorePlot)
            plot.show(series_of(list(table.rows_by_id.values()), champ))

    # -- actions -------------------------------------------------------------------

    def action_filter(self) -> None:
        bar = self.query_one(FilterBar)
        bar.add_class("shown")
        bar.focus()

    def on_filter_bar_applied(self, event: FilterBar.Applied) -> None:
        bar = self.query_one(FilterBar)
        self.table.set_query(event.query)
        if not event.query:
            bar.remove_class("shown")
        self.table.focus()
        n = self.table.row_count
        self.notify(f"{n} candidates match" if event.query else "filter cleared", timeout=2)

    def action_lineage(self) -> None:
        from rsiframe.viewer.screens.lineage import LineageScreen

        self.app.push_screen(LineageScreen(self.source))

    def action_recipe_diff(self) -> None:
        from rsiframe.viewer.screens.recipe_diff import RecipeDiffScreen

        opened = list(getattr(self.app, "sources", {}).values())
        others = [s for s in opened if s is not self.source] if len(opened) > 1 else None
        self.app.push_screen(RecipeDiffScreen(self.source, others))

    def action_champion(self) -> None:
        champ = self.source.champion()
        if champ is not None:
            self.table.move_to(champ.id)

    def action_toggle_overview(self) -> None:
        self.query_one("#overview").toggle_class("hidden")

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
