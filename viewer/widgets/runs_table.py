"""Several runs side by side: name, recipe, state, budget used, seed vs champion, times.

Column widths come from the content; when the rows are wider than the screen, the least
useful column is cut first (:data:`SHRINK_FIRST`: the run folder's name repeats its recipe
and time, then the budget's details, then the grid label), each down to :data:`MIN_WIDTH`,
with an ellipsis, so state, recipe and dates stay whole."""

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


#: the columns cut first when the table is wider than the screen, least useful first
SHRINK_FIRST = ("run", "budget", "grid", "recipe", "champion", "seed", "started", "ended")
MIN_WIDTH = 10


def fit_widths(natural: dict[str, int], available: int, padding: int) -> dict[str, int]:
    """Each column's width: its content's, less what the screen lacks, taken from the
    columns in :data:`SHRINK_FIRST` order (never below :data:`MIN_WIDTH`)."""
    widths = dict(natural)
    over = sum(widths.values()) + padding * len(widths) - available
    for key in SHRINK_FIRST:
        if over <= 0:
            break
        cut = min(over, max(0, widths.get(key, 0) - MIN_WIDTH))
        if key in widths:
            widths[key] -= cut
            over -= cut
    return widths


def fitted(cell: Text, width: int) -> Text:
    if cell.cell_len <= width:
        return cell
    short = cell.copy()
    short.truncate(width, overflow="ellipsis")
    return short


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
        self.keys = (["grid"] if self.grouped else []) + [key for key, _ in COLUMNS]
        labels = dict(COLUMNS, grid="grid")
        self.cells: dict[str, dict[str, Text]] = {
            key: self._cells(s) for key, s in self.sources.items()
        }
        self.widths = self._fit()
        for col in self.keys:
            self.add_column(labels[col], key=col)
        for key, row in self.cells.items():
            self.add_row(*(fitted(row[c], self.widths[c]) for c in self.keys), key=key)

    def _cells(self, s: RunSource) -> dict[str, Text]:
        g = self.groups[str(s.root)]
        lead = {"grid": Text(g[0] if g else "—", style="cyan")} if self.grouped else {}
        return {**lead, **dict(zip((k for k, _ in COLUMNS), run_cells(s), strict=True))}

    def _fit(self) -> dict[str, int]:
        labels = dict(COLUMNS, grid="grid")
        natural = {
            c: max([len(labels[c])] + [row[c].cell_len for row in self.cells.values()])
            for c in self.keys
        }
        # the screen's width less the scroll bar
        available = (self.size.width or self.app.size.width) - 2
        return fit_widths(natural, available, 2 * self.cell_padding)

    def _refit(self, changed_row: str | None = None) -> None:
        """The cells again at the widths the content and screen now give: a column whose
        width moved in every row, the rest in ``changed_row`` only."""
        before, self.widths = self.widths, self._fit()
        moved = [c for c in self.keys if self.widths[c] != before.get(c)]
        for key, row in self.cells.items():
            for col in self.keys if key == changed_row else moved:
                self.update_cell(key, col, fitted(row[col], self.widths[col]), update_width=True)

    def on_resize(self) -> None:
        if getattr(self, "cells", None):
            self._refit()

    def refresh_source(self, s: RunSource) -> None:
        key = str(s.root)
        if key not in self.sources:
            return
        self.cells[key] = self._cells(s)
        self._refit(changed_row=key)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(RunChosen(self.sources[str(event.row_key.value)]))
