"""Rich progress for ``run`` and ``resume``: generation, candidate, stage, best score."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from rsiframe.archive import Event
from rsiframe.opcall import Progress as ProgressSink
from rsiframe.state import RunState


class RichProgress(ProgressSink):
    """One live line on stderr, plus a printed line per finished candidate."""

    def __init__(self, console: Console, generations: int | None, candidates: int | None) -> None:
        self.console = console
        self.generations = generations
        self.max_candidates = candidates
        self.children = 0
        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.bar.add_task("starting", total=None)
        self.generation = 0
        self.cid = ""
        self.stage_name = ""
        self.best = ""

    def __enter__(self) -> RichProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def _refresh(self) -> None:
        total = f"/{self.generations}" if self.generations is not None else ""
        count = f" ({self.children}/{self.max_candidates})" if self.max_candidates else ""
        text = f"gen {self.generation}{total} · {self.cid or '—'}{count} · {self.stage_name}"
        if self.best:
            text += f" · best gate {self.best}"
        self.bar.update(self.task, description=text)

    def event(self, ev: Event, state: RunState) -> None:
        d = ev.data
        if ev.type == "generation_started":
            self.generation = d["generation"]
        elif ev.type == "candidate_proposed":
            self.cid = d["id"]
        if ev.type == "candidate_proposed" or ev.type == "session_started":
            self.children = state.children()
        elif ev.type in ("candidate_gated", "candidate_rejected", "candidate_abandoned"):
            self._line(state, d["id"])
        elif ev.type == "evaluation_failed":
            self.console.print(
                f"[red]{d['id']} {d['split']} evaluation failed:[/] {escape(str(d['error']))}"
            )
        champ = state.champion()
        if champ is not None:
            self.best = f"{champ.score('gate'):.3f} ({champ.id})"
        self._refresh()

    def _line(self, state: RunState, cid: str) -> None:
        c = state.candidates[cid]
        gate = c.score("gate")
        parent = state.candidates.get(c.parent) if c.parent else None
        delta = ""
        if gate is not None and parent is not None and parent.score("gate") is not None:
            delta = f" ({gate - (parent.score('gate') or 0.0):+.3f})"
        color = {"admitted": "green", "declined": "yellow"}.get(c.state, "red")
        score = f"gate {gate:.3f}{delta}" if gate is not None else ""
        what = c.description
        if c.rejected:
            what = "; ".join(c.rejected.get("reasons", []))[:160]
        arrow = f" ← {c.parent}" if c.parent else ""
        # the description and reasons are a candidate's own text: escaped, never markup
        self.console.print(f"{cid}{arrow} [{color}]{c.state}[/] {score} {escape(what)}".rstrip())

    def stage(self, cid: str, stage: str) -> None:
        self.cid, self.stage_name = cid, stage
        self.bar.update(self.task, total=None, completed=0)
        self._refresh()

    def tasks(self, cid: str, split: str, done: int, total: int) -> None:
        self.bar.update(self.task, total=total, completed=done)

    def note(self, message: str) -> None:
        self.console.print(message, markup=False)
