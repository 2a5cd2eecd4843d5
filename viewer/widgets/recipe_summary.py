"""The recipe at a glance: slots and their operators, budget limits, split, surface."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from rsiframe.api import SLOTS


def _short(config: Any, width: int = 48) -> str:
    if not config:
        return ""
    text = json.dumps(config, separators=(", ", ": "), sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def recipe_table(recipe: dict[str, Any], source: str = "", width: int = 80) -> Table:
    """Slots, operators and (when ``width`` allows) their configs."""
    wide = width >= 44
    table = Table.grid(padding=(0, 1))
    table.add_column(style="dim", no_wrap=True, min_width=8)
    table.add_column(style="bold", no_wrap=True, overflow="ellipsis")
    if wide:
        table.add_column(style="dim", no_wrap=True, overflow="ellipsis")
    slots = recipe.get("slots") or {}
    for slot in SLOTS:
        spec = slots.get(slot)
        if not spec:
            continue
        row = [slot, str(spec.get("operator", "?"))]
        table.add_row(*row, *([_short(spec.get("config"), max(8, width - 28))] if wide else []))
    split = ((recipe.get("tasks") or {}).get("split")) or {}
    if isinstance(split, dict) and any(isinstance(v, list) for v in split.values()):
        sizes = ", ".join(
            f"{k} {len(split[k])}"
            for k in ("train", "gate", "sealed")
            if isinstance(split.get(k), list)
        )
        table.add_row("tasks", sizes)
    surface = recipe.get("surface") or {}
    if surface.get("include"):
        table.add_row("surface", ", ".join(surface["include"]))
    limits = {k: v for k, v in (recipe.get("budget") or {}).items() if v is not None}
    if limits:
        short = ", ".join(f"{k.removeprefix('max_')} {v}" for k, v in limits.items())
        table.add_row("budget", short)
    if source:
        table.add_row("recipe", source.rsplit("/", 1)[-1])
    return table


class RecipeSummary(Widget):
    def __init__(self, recipe: dict[str, Any], source: str = "", **kw) -> None:
        super().__init__(**kw)
        self.recipe = recipe
        self.source = source

    def render(self) -> Table | Text:
        if not self.recipe:
            return Text("recipe.lock.json has no resolved recipe", style="dim")
        return recipe_table(self.recipe, self.source, self.size.width)
