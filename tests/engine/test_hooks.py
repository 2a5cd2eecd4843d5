"""rsiframe.engine.hooks: the archive notifies the run's hooks of every event it writes,
each hook sees the notices it registered for, in order, after the fold; the one table of
which events raise which notices is ``kinds_of``."""

from __future__ import annotations

import pytest

from rsiframe.archive import events as E
from rsiframe.archive.log import Event
from rsiframe.engine.hooks import (
    EVALUATE,
    Hooks,
    Lifecycle,
    Notice,
    ProgressRelay,
    kinds_of,
)
from rsiframe.slots.calls import Progress
from tests.support.runlog import SEED, SignedRun


@pytest.mark.parametrize(
    ("data", "kinds"),
    [
        (E.SessionStarted(), [Lifecycle.EVENT_WRITTEN]),
        (
            E.TasksRun(id="c1", purpose="rollout", tasks=2),
            [Lifecycle.EVENT_WRITTEN, Lifecycle.TASK_RUNS_CHARGED],
        ),
        (
            E.UsageSpent(id="c1", slot=EVALUATE, tokens=5),
            [Lifecycle.EVENT_WRITTEN, Lifecycle.MODEL_TOKENS_SPENT, Lifecycle.EVALUATION_TOKENS],
        ),
        # an evaluation's agent calling the gateway's model: no served model to meter, but
        # its tokens size the hold for the champion's sealed evaluation
        (
            E.ModelCall(seq=1, slot=EVALUATE, consumer="evaluate:train:c1"),
            [Lifecycle.EVENT_WRITTEN, Lifecycle.EVALUATION_TOKENS],
        ),
        (E.ModelCall(seq=1, slot="mutate", consumer="mutate:c1"), [Lifecycle.EVENT_WRITTEN]),
        # an operator's own report of its usage is no evaluation's metered model
        (E.UsageSpent(id="c1", slot="mutate", tokens=5), [Lifecycle.EVENT_WRITTEN]),
    ],
)
def test_which_events_raise_which_notices(data: E.EventData, kinds: list[Lifecycle]) -> None:
    assert kinds_of(data) == kinds


def test_every_written_event_reaches_the_hooks_after_the_fold(signed_run: SignedRun) -> None:
    seen: list[tuple[str, str, int]] = []
    signed_run.hooks.add_hook(
        Lifecycle.EVENT_WRITTEN,
        lambda n: seen.append((n.kind.value, n.event.type, len(signed_run.state.candidates))),
    )
    signed_run.seed()
    assert [t for _, t, _ in seen] == [e.type for e in signed_run.events]
    proposed = next(n for _, t, n in seen if t == "candidate_proposed")
    assert proposed == 1  # the fold (the first hook) already holds the new candidate
    assert all(kind == "event_written" for kind, _, _ in seen)


def test_hooks_of_a_kind_run_in_the_order_added_with_the_typed_event(
    signed_run: SignedRun,
) -> None:
    signed_run.seed()
    signed_run.propose("c0001", SEED, 1)
    calls: list[tuple[str, Notice]] = []
    for name in ("first", "second"):
        signed_run.hooks.add_hook(
            Lifecycle.TASK_RUNS_CHARGED, lambda n, name=name: calls.append((name, n))
        )
    written = signed_run.emit(E.TasksRun(id="c0001", purpose="minibatch", tasks=3))
    signed_run.emit(E.UsageSpent(id="c0001", slot=EVALUATE, tokens=1))  # another kind
    assert [name for name, _ in calls] == ["first", "second"]
    notice = calls[0][1]
    assert notice.kind is Lifecycle.TASK_RUNS_CHARGED and notice.event == written
    assert notice.data == E.TasksRun(id="c0001", purpose="minibatch", tasks=3)


def test_without_hooks_an_event_is_not_even_parsed() -> None:
    """The archive calls notify for every event; a run without hooks pays nothing."""
    Hooks().notify(Event(0, "no_such_event", {"junk": True}, 0.0, "", ""))
    hooks = Hooks()
    hooks.add_hook(Lifecycle.EVENT_WRITTEN, lambda n: None)
    with pytest.raises(ValueError, match="unknown event type"):
        hooks.notify(Event(0, "no_such_event", {"junk": True}, 0.0, "", ""))


class Recording(Progress):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def event(self, ev: Event, state: object) -> None:
        self.lines.append(f"event {ev.type}")

    def stage(self, cid: str, stage: str) -> None:
        self.lines.append(f"stage {cid} {stage}")

    def tasks(self, cid: str, split: str, done: int, total: int) -> None:
        self.lines.append(f"tasks {cid} {split} {done}/{total}")

    def note(self, message: str) -> None:
        self.lines.append(f"note {message}")


def test_the_progress_relay_reaches_the_view_set_later(signed_run: SignedRun) -> None:
    relay = ProgressRelay(signed_run.state)
    signed_run.hooks.add_hook(Lifecycle.EVENT_WRITTEN, relay.on_event)
    signed_run.start()  # before a view is shown: nowhere, and no error
    view = Recording()
    relay.show(view)
    signed_run.propose(SEED, None, 0)
    relay.stage(SEED, "evaluate train")
    relay.tasks(SEED, "train", 1, 4)
    relay.note("resumed")
    assert view.lines == [
        "event candidate_proposed",
        "stage c0000 evaluate train",
        "tasks c0000 train 1/4",
        "note resumed",
    ]
