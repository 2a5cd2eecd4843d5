"""The runs screen: every run under a folder such as archive/."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Static

from rsiframe.viewer.messages import RunUpdated
from rsiframe.viewer.source import RunSource
from rsiframe.viewer.widgets.runs_table import RunsTable


class RunsScreen(Screen):
    def __init__(self, title: str, sources: list[RunSource], skipped: list[str]) -> None:
        super().__init__()
        self.title_text = title
        self.sources = sources
        self.skipped = skipped

    def compose(self) -> ComposeResult:
        head = Text(f"{self.title_text}: {len(self.sources)} runs", style="bold")
        for note in self.skipped[:3]:
            head.append(f"\n⚠ skipped {note}", style="red")
        yield Static(head, id="runs-title")
        yield RunsTable(self.sources, id="runs")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(RunsTable).focus()
        for s in self.sources:
            self.app.ensure_loading(s)  # type: ignore[attr-defined]  # ViewerApp's (app.py imports this)

    def run_updated(self, msg: RunUpdated) -> None:
        if msg.done:
            self.query_one(RunsTable).refresh_source(msg.source)

    def is_ready(self) -> bool:
        return all(s.loaded for s in self.sources)
