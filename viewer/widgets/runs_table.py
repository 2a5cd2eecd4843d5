"""Several runs side by side: name, recipe, state, budget used, seed vs champion, times."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from rsiframe.archive.state import Candidate
from rsiframe.study.gridspec import cell_of
from rsiframe.viewer import fmt
from rsiframe.viewer.messages import RunChosen
from rsiframe.viewer.source import RunSource

COLUMNS = (
    ("run", "run"),
    ("recipe", "recipe"),
    ("state", "state"),
    ("seed", "seed gate/sealed"),
    ("champion", "champion gate/sealed"),
    ("budget", "budget used"),
    ("started", "started"),
    ("ended", "ended"),
)


def pair(c: Candidate | None) -> str:
    if c is None:
        return "—"
    return f"{fmt.score(c.score('gate'))} / {fmt.score(c.score('sealed'))}"


def run_cells(s: RunSource) -> list:
    st = s.state
    with s.lock:
        seed, champ = st.seed, s.champion()
        ended = fmt.when(st.last_ts) if st.terminal is not None else "—"
        budget = fmt.budget_line(s.budget()) if s.loaded else "…"
        champ_text = Text(pair(champ))
        if champ is not None:
            champ_text = Text.assemble((champ.id + " ", "yellow"), pair(champ))
        return [
            Text(s.root.name, style="bold"),
            # the recipe's name, which names its overrides (``sat3[select=best]``)
            Text(st.name or s.recipe_source.rsplit("/", 1)[-1], style=""),
            fmt.state(s.run_state()),
            Text(pair(seed)),
            champ_text,
            Text(budget, style="dim"),
            Text(fmt.when(st.started_at), style="dim"),
            Text(ended, style="dim"),
        ]


def grid_group(s: RunSource) -> tuple[str, int, int] | None:
    """(label, cell index, repeat) when the run is a cell of an ablate grid."""
    cell = cell_of(s.root)
    if cell is None:
        return None
    spec, name, repeat = cell
    return f"{s.root.parent.name}: {spec.label(name)}", spec.cell_names().index(name), repeat


class RunsTable(DataTable):
    """One row per run; the runs of an ablate grid are grouped by cell (a grid column)."""

    def __init__(self, sources: list[RunSource], **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        groups = {str(s.root): grid_group(s) for s in sources}
        self.grouped = any(g is not None for g in groups.values())

        def order(s: RunSource) -> tuple:
            g = groups[str(s.root)]
            return (0, "", 0, 0) if g is None else (1, s.root.parent.name, g[1], g[2])

        ordered = sorted(sources, key=order) if self.grouped else sources
        self.sources = {str(s.root): s for s in ordered}
        self.groups = groups

    def on_mount(self) -> None:
        if self.grouped:
            self.add_column("grid", key="grid")
        for key, label in COLUMNS:
            self.add_column(label, key=key)
        for key, s in self.sources.items():
            g = self.groups[key]
            lead = [Text(g[0] if g else "—", style="cyan")] if self.grouped else []
            self.add_row(*lead, *run_cells(s), key=key)

    def refresh_source(self, s: RunSource) -> None:
        key = str(s.root)
        if key not in self.sources:
            return
        for (col, _), value in zip(COLUMNS, run_cells(s), strict=True):
            self.update_cell(key, col, value, update_width=True)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(RunChosen(self.sources[str(event.row_key.value)]))
