"""The lineage screen: the candidate tree of one run."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from rsiframe.viewer.messages import RunUpdated
from rsiframe.viewer.source import RunSource
from rsiframe.viewer.widgets.lineage_tree import LineageTree


class LineageScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, source: RunSource) -> None:
        super().__init__()
        self.source = source

    def compose(self) -> ComposeResult:
        title = Text(f"{self.source.name}: lineage  ", style="bold")
        title.append("★ seed → champion   ", style="bold yellow")
        title.append("dim: declined, rejected, failed", style="dim")
        yield Static(title, id="lineage-title")
        yield LineageTree(self.source, id="lineage")
        yield Footer()

    def on_mount(self) -> None:
        tree = self.query_one(LineageTree)
        tree.rebuild()
        tree.focus()
        self.call_after_refresh(tree.action_goto_champion)

    def run_updated(self, msg: RunUpdated) -> None:
        if msg.source is self.source and msg.done:
            self.query_one(LineageTree).rebuild()

    def is_ready(self) -> bool:
        return True
