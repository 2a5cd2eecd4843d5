"""Why a candidate exists and what happened to it: selection, operator notes, analysis,
the mutation, lessons, and — when it did not make it — rejection and failure reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text
from textual.widgets import Static

from rsiframe.archive.log import Event
from rsiframe.archive.state import Candidate
from rsiframe.errors import RsiError
from rsiframe.viewer.evidence import read_json, read_text


def _json(value: Any) -> RenderableType:
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    if len(text) > 6000:
        text = text[:6000] + "\n… (truncated; see the evidence tab)"
    return Syntax(text, "json", theme="ansi_dark", word_wrap=True)


def _section(title: str, style: str = "bold") -> Text:
    return Text(f"\n{title}", style=style)


def notes_group(
    run: Path,
    c: Candidate,
    events: list[Event],
    lessons: dict[int, str],
    violations: list[dict[str, Any]] | None = None,
) -> Group:
    """Everything here is read from events and (small) artifacts."""
    parts: list[RenderableType] = []
    by_type: dict[str, list[dict]] = {}
    for ev in events:
        by_type.setdefault(ev.type, []).append(ev.data)

    def artifact(digest: str | None) -> RenderableType:
        if not digest:
            return Text("—", style="dim")
        try:
            return _json(read_json(run, digest))
        except (RsiError, ValueError) as exc:
            return Text(str(exc), style="red")

    if c.rejected:
        r = c.rejected
        parts.append(_section(f"rejected at {r.get('stage')}", "bold red"))
        for reason in r.get("reasons") or []:
            parts.append(Text(f"  • {reason}", style="red"))
        for v in r.get("violations") or []:
            parts.append(
                Text(f"  guardrail: {v.get('reason', '')}: {v.get('path', '')}", style="red")
            )
        if r.get("output"):
            parts.append(_section("validate output", "bold"))
            parts.append(Text(r["output"], style="dim"))
        if r.get("traceback"):
            parts.append(_section("operator traceback", "bold"))
            parts.append(Text(read_text(run, r["traceback"]), style="dim"))
    for v in violations or []:
        if v.get("candidate") == c.id:
            parts.append(_section("information-flow violation", "bold red"))
            parts.append(_json(v))
    if c.abandoned is not None:
        parts.append(_section(f"abandoned: {c.abandoned}", "bold yellow"))
    for failed in by_type.get("evaluation_failed", []):
        parts.append(
            _section(f"evaluation {failed['split']} #{failed['attempt']} failed", "bold magenta")
        )
        parts.append(Text(f"  {failed.get('error', '')}", style="magenta"))
        if failed.get("traceback"):
            parts.append(Text(read_text(run, failed["traceback"]), style="dim"))
    for proposed in by_type.get("candidate_proposed", []):
        parts.append(_section("selected"))
        parent = proposed.get("parent")
        parts.append(
            Text(f"  parent {parent}: {proposed.get('reason', '')}" if parent else "  seed")
        )
    if c.decision:
        parts.append(_section("gate"))
        verdict = "admitted" if c.decision["admit"] else "declined"
        parts.append(Text(f"  {verdict}: {c.decision['reason']}"))
    if c.notes:
        parts.append(_section("operator notes (record)"))
        parts.append(_json(c.notes))
    if c.analysis:
        parts.append(_section("analysis"))
        parts.append(artifact(c.analysis))
    for mutated in by_type.get("candidate_mutated", []):
        if mutated.get("mutation"):
            parts.append(_section("mutation"))
            parts.append(artifact(mutated["mutation"]))
    if c.model:  # model identity of a D/T/H build
        parts.append(_section("model built"))
        parts.append(_json(c.model))
    for key, title in (
        (c.generation - 1, "lessons handed to this generation"),
        (c.generation, "lessons after this generation"),
    ):
        if key in lessons:
            parts.append(_section(title))
            parts.append(Text(read_text(run, lessons[key]), style="dim"))
    if not parts:
        parts.append(Text("no notes", style="dim"))
    return Group(*parts)


class NotesView(Static):
    def show(self, group: Group) -> None:
        self.update(group)
