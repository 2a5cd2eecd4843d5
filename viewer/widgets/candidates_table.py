"""The candidates table: one line per candidate, sortable, filterable, updated in place.

A virtual table (Textual's line API): only the lines on screen are rendered, so 10,000
candidates scroll, sort and filter as fast as 10. Sorting and filtering work on the list
of :class:`~rsiframe.viewer.source.Row`; the header line stays on top.
"""

from __future__ import annotations

import functools

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from rsiframe.viewer import fmt
from rsiframe.viewer.messages import CandidateChosen
from rsiframe.viewer.source import Row, RunSource

#: (key, label, width, right-aligned); the last column takes the rest of the line
COLUMNS = (
    ("id", "id", 8, False),
    ("gen", "gen", 4, True),
    ("parent", "parent", 7, False),
    ("state", "state", 10, False),
    ("train", "train", 6, True),
    ("gate", "gate", 6, True),
    ("sealed", "sealed", 6, True),
    ("badge", "✓", 1, False),
    ("decision", "change / decision", 0, False),
)
SORTS = ("id", "gate", "train", "sealed", "gen", "state")
HEADER = Style(bold=True, reverse=False, underline=True)
CURSOR = Style(bgcolor="#2f4f6f", bold=True)
DIM = Style(dim=True)
CHAMP = Style(color="yellow", bold=True)


def _key(row: Row, column: str) -> tuple:
    if column in ("train", "gate", "sealed"):
        v = getattr(row, column)
        return (v is not None, v if v is not None else 0.0, -row.index)
    if column == "gen":
        return (row.generation, row.index)
    if column == "state":
        return (row.state, row.index)
    return (row.index,)


def matches(row: Row, query: str) -> bool:
    """Every word of ``query`` occurs in the row (``state:x``/``gen:n``/``parent:id`` exact)."""
    if not query:
        return True
    hay = " ".join(
        (row.id, row.state, row.parent, row.decision, row.description, f"g{row.generation}")
    ).lower()
    for word in query.lower().split():
        field, sep, value = word.partition(":")
        if sep and field in ("state", "gen", "parent", "id"):
            have = {"state": row.state, "gen": str(row.generation), "parent": row.parent}.get(
                field, row.id
            )
            if have.lower() != value:
                return False
        elif word not in hay:
            return False
    return True


@functools.cache
def _style(spec: str) -> Style:
    return Style.parse(spec)


def _cell(text: str, width: int, right: bool) -> str:
    text = text if len(text) <= width else text[: max(0, width - 1)] + "…"
    return text.rjust(width) if right else text.ljust(width)


class CandidatesTable(ScrollView, can_focus=True):
    """Enter opens a candidate; ``s`` cycles the sort column, ``r`` reverses it."""

    BINDINGS = [
        Binding("enter", "open", "Open", show=False),
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "edge(0)", show=False),
        Binding("end", "edge(1)", show=False),
        Binding("s", "cycle_sort", "Sort"),
        Binding("r", "reverse", "Reverse", show=False),
    ]

    def __init__(self, source: RunSource, **kw) -> None:
        super().__init__(**kw)
        self.source = source
        self.rows_by_id: dict[str, Row] = {}
        self.view: list[Row] = []
        self.position: dict[str, int] = {}
        self.query_text = ""
        self.sort_column = "id"
        self.descending = False
        self.cursor = 0
        self.champion: str | None = None

    # -- the model -------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self.view)

    def upsert(self, rows: list[Row]) -> None:
        """Add new rows and update changed ones; keeps the active filter, sort and cursor."""
        current = self.selected_id()
        appended = True
        for row in sorted(rows, key=lambda r: r.index):
            known = row.id in self.rows_by_id
            self.rows_by_id[row.id] = row
            shown = row.id in self.position
            if shown:
                self.view[self.position[row.id]] = row
                appended = appended and matches(row, self.query_text)
            elif matches(row, self.query_text):
                self.position[row.id] = len(self.view)
                self.view.append(row)
                appended = appended and not known
        plain_order = self.sort_column == "id" and not self.descending
        top = int(self.scroll_offset.y)
        visible = range(top, top + self.size.height)
        repaint = not (appended and plain_order) or any(
            self.position.get(r.id, -1) in visible for r in rows
        )
        if not (appended and plain_order):
            self._reorder(current)
        self._resize()
        if repaint:  # rows appended below the window only move the scrollbar
            self.refresh()

    def _reorder(self, keep: str | None) -> None:
        rows = [r for r in self.rows_by_id.values() if matches(r, self.query_text)]
        col = self.sort_column
        rows.sort(key=lambda r: _key(r, col), reverse=self.descending)
        self.view = rows
        self.position = {r.id: i for i, r in enumerate(rows)}
        if keep is not None and keep in self.position:
            self.cursor = self.position[keep]
        self.cursor = max(0, min(self.cursor, len(self.view) - 1))

    def _resize(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.view) + 1)

    def set_query(self, text: str) -> None:
        self.query_text = text.strip()
        self._reorder(self.selected_id())
        self._resize()
        self.scroll_to_cursor()
        self.refresh()

    def selected_id(self) -> str | None:
        return self.view[self.cursor].id if 0 <= self.cursor < len(self.view) else None

    def ids(self) -> list[str]:
        return [r.id for r in self.view]

    def move_to(self, cid: str) -> bool:
        if cid not in self.position:
            return False
        self.cursor = self.position[cid]
        self.scroll_to_cursor()
        self.refresh()
        return True

    # -- rendering -------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if y == 0:
            return self._line(None, width)
        index = int(self.scroll_offset.y) + y - 1
        if index >= len(self.view):
            return Strip.blank(width)
        return self._line(self.view[index], width, index == self.cursor and self.has_focus)

    def _line(self, row: Row | None, width: int, cursor: bool = False) -> Strip:
        segments = [Segment(" ")]
        used = 1
        for key, label, w, right in COLUMNS:
            w = w or max(0, width - used)
            if row is None:
                mark = ""
                if key == self.sort_column:
                    mark = "↓" if self.descending else "↑"
                text, style = _cell(label + mark, w, right), HEADER
            else:
                text, style = self._cell(row, key, w, right)
            if cursor:
                style = style + CURSOR
            segments.append(Segment(text, style))
            used += w
            if used < width:
                segments.append(Segment(" ", CURSOR if cursor else None))
                used += 1
            if used >= width:
                break
        return Strip(segments).crop(0, width).extend_cell_length(width, CURSOR if cursor else None)

    def _cell(self, row: Row, key: str, w: int, right: bool) -> tuple[str, Style]:
        dim = row.state in fmt.DIMMED
        base = DIM if dim else Style()
        if key == "id":
            champ = row.id == self.champion
            return _cell(row.id + (" ★" if champ else ""), w, right), CHAMP if champ else base
        if key == "gen":
            return _cell(str(row.generation), w, right), base
        if key == "parent":
            return _cell(row.parent, w, right), base
        if key == "state":
            return _cell(row.state, w, right), _style(fmt.STATE_STYLES.get(row.state, ""))
        if key in ("train", "gate", "sealed"):
            return _cell(fmt.score(getattr(row, key)), w, right), base
        if key == "badge":
            return _cell(row.badge, w, right), _style(fmt.BADGE_STYLES.get(row.badge, ""))
        return _cell(row.description or row.decision, w, right), base

    def on_resize(self, event: events.Resize) -> None:
        self._resize()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    # -- moving ----------------------------------------------------------------------

    def scroll_to_cursor(self) -> None:
        visible = max(1, self.size.height - 1)
        top = int(self.scroll_offset.y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + visible:
            self.scroll_to(y=self.cursor - visible + 1, animate=False)

    def action_move(self, step: int) -> None:
        if self.view:
            self.cursor = max(0, min(len(self.view) - 1, self.cursor + step))
            self.scroll_to_cursor()
            self.refresh()

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(1, self.size.height - 2))

    def action_edge(self, end: int) -> None:
        self.action_move((len(self.view) if end else -len(self.view)) or 0)

    def action_open(self) -> None:
        cid = self.selected_id()
        if cid is not None:
            self.post_message(CandidateChosen(self.source, cid))

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            x = 1
            for key, _, w, _ in COLUMNS:
                if w == 0 or event.x < x + w:
                    if key in SORTS:
                        self.sort_by(key, toggle=True)
                    return
                x += w + 1
            return
        index = int(self.scroll_offset.y) + event.y - 1
        if 0 <= index < len(self.view):
            if index == self.cursor and event.chain >= 2:
                self.action_open()
            self.cursor = index
            self.refresh()

    # -- sorting ---------------------------------------------------------------------

    def sort_by(self, column: str, toggle: bool = False) -> None:
        if toggle and column == self.sort_column:
            self.descending = not self.descending
        else:
            self.sort_column = column
            self.descending = column in ("gate", "train", "sealed")
        self._reorder(self.selected_id())
        self.scroll_to_cursor()
        self.refresh()

    def action_cycle_sort(self) -> None:
        i = SORTS.index(self.sort_column) if self.sort_column in SORTS else -1
        self.sort_by(SORTS[(i + 1) % len(SORTS)])
        self.notify(f"sorted by {self.sort_column}" + (" ↓" if self.descending else " ↑"))

    def action_reverse(self) -> None:
        self.sort_by(self.sort_column, toggle=True)
