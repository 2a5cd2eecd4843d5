"""`d` on a run: pick another run and see how its resolved recipe differs (ablations)."""

from __future__ import annotations

import difflib

import yaml
from rich.syntax import Syntax
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from rsiframe.errors import RsiError
from rsiframe.viewer.discover import find_runs
from rsiframe.viewer.source import RunSource


def recipe_diff(a: RunSource, b: RunSource) -> str:
    def dump(s: RunSource) -> list[str]:
        return yaml.safe_dump(s.recipe, sort_keys=True, default_flow_style=False).splitlines(True)

    lines = difflib.unified_diff(
        dump(b), dump(a), fromfile=f"{b.root.name}", tofile=f"{a.root.name}", n=2
    )
    return "".join(lines)


class RecipeDiffScreen(Screen):
    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]

    def __init__(self, source: RunSource, others: list[RunSource] | None = None) -> None:
        """``others``: the runs to compare with (default: the run folders beside this one)."""
        super().__init__()
        self.source = source
        self.given = others
        self.others: list[RunSource] = []

    def compose(self) -> ComposeResult:
        yield Static(
            Text(f"{self.source.root.name}: resolved recipe against another run", style="bold"),
            id="diff-title",
        )
        with Horizontal():
            yield OptionList(id="other-runs")
            with VerticalScroll(id="recipe-diff-body"):
                yield Static(Text("choose a run on the left", style="dim"), id="recipe-diff")
        yield Footer()

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        self.others = self.given if self.given is not None else self._siblings()
        for i, other in enumerate(self.others):
            options.add_option(Option(other.root.name, id=str(i)))
        if not self.others:
            self.query_one("#recipe-diff", Static).update(
                Text("no other runs beside this one to compare with", style="dim")
            )
        options.focus()

    def _siblings(self) -> list[RunSource]:
        try:
            roots = find_runs(self.source.root.parent)
        except RsiError:
            return []
        out = []
        for root in roots:
            if root != self.source.root:
                try:
                    out.append(RunSource(root))
                except RsiError:
                    continue
        return out

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        other = self.others[int(event.option.id or 0)]
        text = recipe_diff(self.source, other)
        body = self.query_one("#recipe-diff", Static)
        if not text:
            body.update(Text("the resolved recipes are identical", style="green"))
        else:
            body.update(Syntax(text, "diff", theme="ansi_dark"))
