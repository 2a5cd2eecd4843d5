"""A text artifact shown one page at a time (`[` and `]`), its hash checked on the side."""

from __future__ import annotations

import json
from pathlib import Path

from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from rsiframe.audit.evidence import Pager
from rsiframe.errors import RsiError


class PagedText(VerticalScroll):
    can_focus = True
    BINDINGS = [
        Binding("right_square_bracket", "page(1)", "Next page"),
        Binding("left_square_bracket", "page(-1)", "Prev page"),
    ]

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.pager: Pager | None = None
        self.number = 0
        self.title = ""
        self.as_json = False
        self.verdict = ""

    def compose(self):
        yield Static(Text("choose a file on the left", style="dim"), id="paged-head")
        yield Static("", id="paged-body")

    def load(self, run: Path, digest: str, title: str, as_json: bool = False) -> None:
        try:
            self.pager = Pager(run, digest)
        except RsiError as exc:
            self.pager = None
            self.query_one("#paged-head", Static).update(Text(str(exc), style="bold red"))
            self.query_one("#paged-body", Static).update("")
            return
        self.title, self.as_json, self.number, self.verdict = title, as_json, 0, "checking hash…"
        self._render_page()
        self._check(self.pager)

    @work(thread=True, exclusive=True, group="hash")
    def _check(self, pager: Pager) -> None:
        ok = pager.check()
        if pager is self.pager:
            self.verdict = "hash ✓" if ok else "hash ✗ (altered)"
            self.app.call_from_thread(self._render_head)

    def _render_head(self) -> None:
        p = self.pager
        if p is None:
            return
        head = Text(f"{self.title}  ", style="bold")
        head.append(f"page {self.number + 1}/{p.pages} · {p.size:,} bytes · ", style="dim")
        head.append(self.verdict, style="green" if "✓" in self.verdict else "yellow")
        self.query_one("#paged-head", Static).update(head)

    def _render_page(self) -> None:
        p = self.pager
        if p is None:
            return
        self._render_head()
        text = p.page(self.number)
        body = self.query_one("#paged-body", Static)
        if self.as_json and p.pages == 1:
            try:
                pretty = json.dumps(json.loads(text), indent=2)
                body.update(Syntax(pretty, "json", theme="ansi_dark", word_wrap=True))
                return
            except ValueError:
                pass
        body.update(Text(text) if text else Text("(empty)", style="dim"))
        self.scroll_home(animate=False)

    def action_page(self, step: int) -> None:
        if self.pager is None:
            return
        self.number = max(0, min(self.pager.pages - 1, self.number + step))
        self._render_page()
