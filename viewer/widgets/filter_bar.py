"""The `/` filter: words a row must contain; `state:admitted`, `gen:3`, `parent:c0002` match
a field exactly. Enter applies, Escape clears."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input


class FilterBar(Input):
    BINDINGS = [Binding("escape", "clear_filter", "Clear filter")]

    class Applied(Message):
        def __init__(self, query: str) -> None:
            super().__init__()
            self.query = query

    def __init__(self, **kw) -> None:
        super().__init__(placeholder="filter: words, state:admitted, gen:3, parent:c0002", **kw)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Applied(self.value))

    def action_clear_filter(self) -> None:
        self.value = ""
        self.post_message(self.Applied(""))
