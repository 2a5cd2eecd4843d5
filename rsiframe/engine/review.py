"""After evaluation: gate a certified candidate, record notes on it, reflect on a generation.

Each step calls its operator through :class:`~rsiframe.slots.calls.OperatorCalls` and
returns the event the engine records. An operator that fails does not stop the run:
gate declines, record keeps the error as its notes, reflect keeps the old lessons.
"""

from __future__ import annotations

from collections.abc import Callable

from rsiframe.api import GateContext, GateDecision, RecordContext, ReflectContext
from rsiframe.archive import events as E
from rsiframe.archive.state import Candidate, RunState
from rsiframe.slots.calls import OperatorCalls, OperatorFailed
from rsiframe.slots.runview import as_view


def gate(calls: OperatorCalls, state: RunState, c: Candidate) -> E.CandidateGated:
    if c.is_seed:
        decision = GateDecision(admit=True, reason="seed (anchor)")
    else:
        assert c.parent is not None
        parent = state.candidates[c.parent]
        ctx = GateContext(
            calls.view, calls.rng(c.id, "gate"), c.generation, as_view(c), as_view(parent)
        )
        op = calls.op("gate")
        try:
            decision = calls.call(c.id, "gate", lambda: op.gate(ctx))
        except OperatorFailed as exc:
            decision = GateDecision(admit=False, reason=str(exc))
    return E.CandidateGated(id=c.id, admit=decision.admit, reason=decision.reason)


def record(calls: OperatorCalls, state: RunState, c: Candidate) -> E.CandidateRecorded:
    parent = state.candidates.get(c.parent) if c.parent else None
    assert c.decision is not None
    decision = GateDecision(admit=c.decision["admit"], reason=c.decision["reason"])
    ctx = RecordContext(
        calls.view,
        calls.rng(c.id, "record"),
        c.generation,
        as_view(c),
        as_view(parent) if parent else None,
        decision,
        c.changes,
    )
    op = calls.op("record")
    try:
        notes = calls.call(c.id, "record", lambda: op.record(ctx)).notes
    except OperatorFailed as exc:
        notes = {"error": str(exc)}
    return E.CandidateRecorded(id=c.id, notes=notes)


def reflect(
    calls: OperatorCalls, state: RunState, generation: int, put: Callable[[bytes], str]
) -> E.GenerationReflected:
    members = [
        as_view(c)
        for c in state.candidates.values()
        if c.generation == generation and not c.is_seed
    ]
    key = f"g{generation}"
    ctx = ReflectContext(
        calls.view, calls.rng(key, "reflect"), generation, calls.view.lessons, members
    )
    op = calls.op("reflect")
    try:
        lessons = calls.call(key, "reflect", lambda: op.reflect(ctx)).lessons
    except OperatorFailed as exc:
        calls.progress.note(str(exc))
        lessons = calls.view.lessons
    return E.GenerationReflected(generation=generation, lessons=put(lessons.encode()))
