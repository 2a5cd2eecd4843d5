"""Per-task rewards of a candidate: one row per task, one column per split."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from rsiframe.archive.state import Candidate


class RewardsTable(DataTable):
    def __init__(self, **kw) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)

    def show(self, c: Candidate) -> None:
        self.clear(columns=True)
        self.add_columns("split", "task", "reward", "error")
        for split in ("train", "gate", "sealed"):
            rec = c.record(split)
            if rec is None:
                continue
            p = rec.predicate
            for task in sorted(p.rewards):
                r = p.rewards[task]
                style = "green" if r >= 1 else ("yellow" if r > 0 else "red")
                self.add_row(
                    split,
                    task,
                    Text(f"{r:.3f}", style=style, justify="right"),
                    Text(p.errors.get(task, ""), style="dim"),
                    key=f"{split}/{task}",
                )
