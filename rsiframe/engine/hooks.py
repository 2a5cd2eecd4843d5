"""A run's lifecycle notifications: a typed enum, the notice each hook receives, and the
hook list collaborators register on (``add_hook``). The archive calls :meth:`Hooks.notify`
once per appended event; the one table of which events raise which notices is
:func:`kinds_of`, so no collaborator reads event names off the archive itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from rsiframe.archive import events as E
from rsiframe.archive.log import Event
from rsiframe.archive.state import RunState
from rsiframe.slots.calls import Progress

#: the framework's own evaluation, where an evaluation's served model is metered
EVALUATE = "evaluate"


class Lifecycle(Enum):
    """What happened in a run, as hooks see it (in this order for one event)."""

    EVENT_WRITTEN = "event_written"  # appended, signed and chained (the fold comes first)
    TASK_RUNS_CHARGED = "task_runs_charged"  # uncertified task runs charged (max_task_runs)
    MODEL_TOKENS_SPENT = "model_tokens_spent"  # an evaluation's served model spent tokens
    #: an evaluation's agent spent model tokens (its served model, or the gateway's model)
    EVALUATION_TOKENS = "evaluation_tokens"


@dataclass(frozen=True)
class Notice:
    """One notification: its kind, the archive's event and that event's typed model."""

    kind: Lifecycle
    event: Event
    data: E.EventData


Hook = Callable[[Notice], None]


def kinds_of(data: E.EventData) -> list[Lifecycle]:
    """The notices one event raises (every event: ``EVENT_WRITTEN``)."""
    kinds = [Lifecycle.EVENT_WRITTEN]
    if isinstance(data, E.TasksRun):
        kinds.append(Lifecycle.TASK_RUNS_CHARGED)
    if isinstance(data, E.UsageSpent) and data.slot == EVALUATE:
        kinds.append(Lifecycle.MODEL_TOKENS_SPENT)
    if isinstance(data, (E.UsageSpent, E.ModelCall)) and data.slot == EVALUATE:
        kinds.append(Lifecycle.EVALUATION_TOKENS)
    return kinds


@dataclass
class Hooks:
    """The run's hooks by kind, each list called in the order hooks were added."""

    _hooks: dict[Lifecycle, list[Hook]] = field(default_factory=dict)

    def add_hook(self, kind: Lifecycle, hook: Hook) -> None:
        self._hooks.setdefault(kind, []).append(hook)

    def notify(self, event: Event) -> None:
        """The archive appended ``event``: every hook of every notice it raises."""
        if not self._hooks:
            return
        data = E.parse(event.type, event.data)
        for kind in kinds_of(data):
            for hook in self._hooks.get(kind, ()):
                hook(Notice(kind, event, data))


class ProgressRelay(Progress):
    """The run's one progress sink, handed to every collaborator at construction; what it
    reaches is set later (:meth:`show`: the CLI's live view), so no collaborator's
    attribute is ever replaced from outside."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.sink = Progress()

    def show(self, sink: Progress) -> None:
        self.sink = sink

    def on_event(self, notice: Notice) -> None:
        """A hook (``EVENT_WRITTEN``): every event, after the fold."""
        self.sink.event(notice.event, self.state)

    def event(self, ev: Event, state: RunState) -> None:
        self.sink.event(ev, state)

    def stage(self, cid: str, stage: str) -> None:
        self.sink.stage(cid, stage)

    def tasks(self, cid: str, split: str, done: int, total: int) -> None:
        self.sink.tasks(cid, split, done, total)

    def note(self, message: str) -> None:
        self.sink.note(message)
