"""Rich progress for ``run`` and ``resume``: generation, each candidate in flight and its
stage, best score. Stages and task counts arrive from worker threads (candidates in
flight); events from the writer."""

from __future__ import annotations

import threading

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
from rich.text import Text

from rsiframe.archive.log import Event
from rsiframe.archive.state import RunState
from rsiframe.evaluators import health
from rsiframe.slots.calls import Progress as ProgressSink


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
        self.stages: dict[str, str] = {}  # candidate in flight -> its stage
        self.best = ""
        self._lock = threading.Lock()
        self.infra: dict[str, int] = {}  # split -> tasks errored for infrastructure reasons

    def __enter__(self) -> RichProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def _refresh(self) -> None:
        total = f"/{self.generations}" if self.generations is not None else ""
        count = f" ({self.children}/{self.max_candidates})" if self.max_candidates else ""
        with self._lock:
            flight = " · ".join(f"{c} {s}" for c, s in sorted(self.stages.items())[-6:])
        text = f"gen {self.generation}{total}{count} · {flight or '—'}"
        if self.best:
            text += f" · best gate {self.best}"
        if any(self.infra.values()):
            errs = ", ".join(f"{s} {n}" for s, n in self.infra.items() if n)
            text += f" · [red]infrastructure errors: {errs}[/]"
        self.bar.update(self.task, description=text)

    def event(self, ev: Event, state: RunState) -> None:
        d = ev.data
        if ev.type == "generation_started":
            self.generation = d["generation"]
        elif ev.type == "candidate_proposed":
            self._set(d["id"], "proposed")
        elif ev.type == "evaluation_certified":
            self._set(d["id"], f"certified {d['split']}")
        if ev.type == "candidate_proposed" or ev.type == "session_started":
            self.children = state.children()
        elif ev.type in ("candidate_gated", "candidate_rejected", "candidate_abandoned"):
            with self._lock:
                self.stages.pop(d["id"], None)
            self._line(state, d["id"])
        elif ev.type == "task_finished" and health.reason_of(d.get("error")):
            self.infra[d["split"]] = self.infra.get(d["split"], 0) + 1
        elif ev.type == "evaluation_certified":
            self._health(state, d["id"], d["split"])
        elif ev.type == "evaluation_failed":
            self.console.print(
                f"[red]{d['id']} {d['split']} evaluation failed:[/] {escape(str(d['error']))}"
            )
        champ = state.champion()
        if champ is not None:
            self.best = f"{champ.score('gate'):.3f} ({champ.id})"
        self._refresh()

    def _health(self, state: RunState, cid: str, split: str) -> None:
        c = state.candidates.get(cid)
        h = health.of_candidate(c).get(split) if c is not None else None
        if h is not None and h.counts:
            self.console.print(Text(f"{cid} {health.describe(split, h)}", style="red"))

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

    def _set(self, cid: str, stage: str) -> None:
        with self._lock:
            self.stages[cid] = stage

    def stage(self, cid: str, stage: str) -> None:
        self._set(cid, stage)
        self.bar.update(self.task, total=None, completed=0)
        self._refresh()

    def tasks(self, cid: str, split: str, done: int, total: int) -> None:
        self._set(cid, f"{split} {done}/{total}")
        self.bar.update(self.task, total=total, completed=done)
        self._refresh()

    def note(self, message: str) -> None:
        self.console.print(message, markup=False)
