"""Why a candidate exists and what happened to it: selection, operator notes, analysis,
the mutation, lessons, and — when it did not make it — rejection and failure reasons."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text
from textual.widgets import Static

from rsiframe.archive.log import Event
from rsiframe.archive.state import Candidate
from rsiframe.audit.evidence import read_json, read_text
from rsiframe.errors import RsiError


def _json(value: Any) -> RenderableType:
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    if len(text) > 6000:
        text = text[:6000] + "\n… (truncated; see the evidence tab)"
    return Syntax(text, "json", theme="ansi_dark", word_wrap=True)


def _section(title: str, style: str = "bold") -> Text:
    return Text(f"\n{title}", style=style)


@dataclass(frozen=True)
class _NotesOf:
    """What the sections of one candidate's notes read: its run folder, the candidate, its
    events' data by type, the run's lessons by generation and its flow violations."""

    run: Path
    c: Candidate
    by_type: dict[str, list[dict]]
    lessons: dict[int, str]
    violations: list[dict[str, Any]]

    def artifact(self, digest: str | None) -> RenderableType:
        if not digest:
            return Text("—", style="dim")
        try:
            return _json(read_json(self.run, digest))
        except (RsiError, ValueError) as exc:
            return Text(str(exc), style="red")


def _rejection(n: _NotesOf) -> list[RenderableType]:
    r = n.c.rejected
    if not r:
        return []
    parts: list[RenderableType] = [_section(f"rejected at {r.get('stage')}", "bold red")]
    parts += [Text(f"  • {reason}", style="red") for reason in r.get("reasons") or []]
    parts += [
        Text(f"  guardrail: {v.get('reason', '')}: {v.get('path', '')}", style="red")
        for v in r.get("violations") or []
    ]
    if r.get("output"):
        parts += [_section("validate output", "bold"), Text(r["output"], style="dim")]
    if r.get("traceback"):
        parts.append(_section("operator traceback", "bold"))
        parts.append(Text(read_text(n.run, r["traceback"]), style="dim"))
    return parts


def _flow_violations(n: _NotesOf) -> list[RenderableType]:
    parts: list[RenderableType] = []
    for v in n.violations:
        if v.get("candidate") == n.c.id:
            parts += [_section("information-flow violation", "bold red"), _json(v)]
    return parts


def _abandonment(n: _NotesOf) -> list[RenderableType]:
    if n.c.abandoned is None:
        return []
    return [_section(f"abandoned: {n.c.abandoned}", "bold yellow")]


def _failed_evaluations(n: _NotesOf) -> list[RenderableType]:
    parts: list[RenderableType] = []
    for failed in n.by_type.get("evaluation_failed", []):
        parts.append(
            _section(f"evaluation {failed['split']} #{failed['attempt']} failed", "bold magenta")
        )
        parts.append(Text(f"  {failed.get('error', '')}", style="magenta"))
        if failed.get("traceback"):
            parts.append(Text(read_text(n.run, failed["traceback"]), style="dim"))
    return parts


def _selection(n: _NotesOf) -> list[RenderableType]:
    parts: list[RenderableType] = []
    for proposed in n.by_type.get("candidate_proposed", []):
        parts.append(_section("selected"))
        parent = proposed.get("parent")
        parts.append(
            Text(f"  parent {parent}: {proposed.get('reason', '')}" if parent else "  seed")
        )
    return parts


def _gate(n: _NotesOf) -> list[RenderableType]:
    if not n.c.decision:
        return []
    verdict = "admitted" if n.c.decision["admit"] else "declined"
    return [_section("gate"), Text(f"  {verdict}: {n.c.decision['reason']}")]


def _operator_notes(n: _NotesOf) -> list[RenderableType]:
    return [_section("operator notes (record)"), _json(n.c.notes)] if n.c.notes else []


def _analysis(n: _NotesOf) -> list[RenderableType]:
    return [_section("analysis"), n.artifact(n.c.analysis)] if n.c.analysis else []


def _mutations(n: _NotesOf) -> list[RenderableType]:
    parts: list[RenderableType] = []
    for mutated in n.by_type.get("candidate_mutated", []):
        if mutated.get("mutation"):
            parts += [_section("mutation"), n.artifact(mutated["mutation"])]
    return parts


def _model(n: _NotesOf) -> list[RenderableType]:
    # the model identity of a D/T/H build
    return [_section("model built"), _json(n.c.model)] if n.c.model else []


def _lessons(n: _NotesOf) -> list[RenderableType]:
    parts: list[RenderableType] = []
    for key, title in (
        (n.c.generation - 1, "lessons handed to this generation"),
        (n.c.generation, "lessons after this generation"),
    ):
        if key in n.lessons:
            parts.append(_section(title))
            parts.append(Text(read_text(n.run, n.lessons[key]), style="dim"))
    return parts


#: the sections of a candidate's notes, top to bottom; each is empty when it does not apply
SECTIONS: tuple[Callable[[_NotesOf], list[RenderableType]], ...] = (
    _rejection,
    _flow_violations,
    _abandonment,
    _failed_evaluations,
    _selection,
    _gate,
    _operator_notes,
    _analysis,
    _mutations,
    _model,
    _lessons,
)


def notes_group(
    run: Path,
    c: Candidate,
    events: list[Event],
    lessons: dict[int, str],
    violations: list[dict[str, Any]] | None = None,
) -> Group:
    """Everything here is read from events and (small) artifacts."""
    by_type: dict[str, list[dict]] = {}
    for ev in events:
        by_type.setdefault(ev.type, []).append(ev.data)
    notes = _NotesOf(run, c, by_type, lessons, violations or [])
    parts = [part for section in SECTIONS for part in section(notes)]
    if not parts:
        parts.append(Text("no notes", style="dim"))
    return Group(*parts)


class NotesView(Static):
    def show(self, group: Group) -> None:
        self.update(group)
