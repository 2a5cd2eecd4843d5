"""One line or three about a candidate: id, state, lineage, commit, change and scores."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from rsiframe.archive.state import Candidate
from rsiframe.viewer import fmt
from rsiframe.viewer.source import badge


def candidate_text(c: Candidate, champion: bool) -> Text:
    t = Text(no_wrap=False)
    t.append(c.id, style="bold yellow" if champion else "bold")
    if champion:
        t.append(" ★ champion", style="yellow")
    t.append("  ")
    t.append_text(fmt.state(c.state))
    t.append("  ")
    t.append_text(fmt.badge(badge(c)))
    if len(c.parents) > 1:  # a merge
        t.append(f"  gen {c.generation}  merge of {' + '.join(c.parents)}", style="magenta")
    else:
        t.append(f"  gen {c.generation}  parent {c.parent or '—'}", style="dim")
    if c.stopped_at:
        t.append(f"  stopped at {c.stopped_at}", style="red")
    commit = c.commit or (c.rejected or {}).get("commit")
    if commit:
        t.append(f"  commit {commit[:12]}", style="dim")
    t.append("\n")
    desc = c.description or (c.rejected or {}).get("description", "")
    t.append(desc or "—")
    t.append("\n")
    for split in ("train", "gate", "sealed"):
        t.append(f"{split} ", style="dim")
        t.append(f"{fmt.score(c.score(split))}   ", style="bold")
    if c.decision:
        t.append(c.decision["reason"], style="dim")
    return t


class CandidateHeader(Static):
    def show(self, c: Candidate, champion: bool) -> None:
        self.update(candidate_text(c, champion))
