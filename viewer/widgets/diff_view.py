"""A candidate's change against its parent: one highlighted block per file."""

from __future__ import annotations

from rich.syntax import Syntax
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from rsiframe.audit.evidence import FileDiff

KIND_STYLES = {"added": "green", "deleted": "red", "modified": "yellow", "renamed": "cyan"}


class DiffView(VerticalScroll):
    can_focus = True

    def show(self, diffs: list[FileDiff], title: str) -> None:
        self.remove_children()
        head = Text(title, style="dim")
        blocks: list[Static] = [Static(head, classes="diff-title")]
        if not diffs:
            blocks.append(Static(Text("no changes", style="dim")))
        for d in diffs:
            name = f"{d.old_path} → {d.path}" if d.old_path else d.path
            blocks.append(
                Static(
                    Text.assemble((f"{d.kind:9s}", KIND_STYLES.get(d.kind, "")), (name, "bold")),
                    classes="diff-file",
                )
            )
            if d.text.startswith("---") or d.text.startswith("@@"):
                body = Syntax(d.text, "diff", theme="ansi_dark", word_wrap=False)
                blocks.append(Static(body, classes="diff-body"))
            else:
                blocks.append(Static(Text(d.text, style="dim"), classes="diff-body"))
        self.mount_all(blocks)

    def message(self, text: str, style: str = "dim") -> None:
        self.remove_children()
        self.mount(Static(Text(text, style=style)))
