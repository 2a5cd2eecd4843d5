"""The recipe at a glance: slots and their operators, budget limits, split, surface."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from rsiframe.api import SLOTS

SLOT_WIDTH = 8  # the longest row label: "validate", "surface", "reflect"


def _short(config: Any, width: int = 48) -> str:
    if not config:
        return ""
    text = json.dumps(config, separators=(", ", ": "), sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def _operator(ref: str) -> str:
    """A file operator by its file name (``/long/path/ops/select.py:Rank`` → ``select.py:Rank``)."""
    target, colon, attr = ref.rpartition(":")
    if colon and "/" in target and not ref.startswith("candidate:"):
        return f"{target.rsplit('/', 1)[-1]}:{attr}"
    return ref


def recipe_table(recipe: dict[str, Any], source: str = "", width: int = 80) -> Table:
    """Slots, operators and (when ``width`` allows) their configs.

    The slot column has a fixed width, so a long operator or config never squeezes it out;
    the operator column gets at most half of what is left, the config the rest.
    """
    wide = width >= 44
    op_width = max(12, (width - SLOT_WIDTH - 2) // 2) if wide else max(8, width - SLOT_WIDTH - 1)
    table = Table.grid(padding=(0, 1))
    table.add_column(style="dim", no_wrap=True, width=SLOT_WIDTH)
    table.add_column(style="bold", no_wrap=True, overflow="ellipsis", max_width=op_width)
    if wide:
        table.add_column(style="dim", no_wrap=True, overflow="ellipsis")
    slots = recipe.get("slots") or {}
    config_width = max(8, width - SLOT_WIDTH - op_width - 2)
    for slot in SLOTS:
        spec = slots.get(slot)
        if not spec:
            continue
        row = [slot, _operator(str(spec.get("operator", "?")))]
        table.add_row(*row, *([_short(spec.get("config"), config_width)] if wide else []))
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
