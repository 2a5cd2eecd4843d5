"""The evidence tree's tasks per attempt: certified records first, then what an attempt
without a record left as ``task_finished`` evidence."""

from __future__ import annotations

from rsiframe.archive import events as E
from rsiframe.viewer.widgets.evidence_tree import attempt_tasks
from tests.support.runlog import SEED, SignedRun


def test_records_first_then_the_evidence_of_unfinished_attempts(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    signed_run.evaluate("c0001", "train", {"t1": 1.0, "t2": 0.0})
    attempt = signed_run.start_evaluation("c0001", "gate", 2)
    signed_run.emit(
        E.TaskFinished(
            id="c0001", split="gate", attempt=attempt, task="g1", reward=1.0, trajectory="d"
        )
    )
    tasks = attempt_tasks(signed_run.state.candidates["c0001"], signed_run.events)
    assert tasks[("train", 1)] == {"t1": (1.0, None, "0" * 64), "t2": (0.0, None, "0" * 64)}
    assert tasks[("gate", 1)] == {"g1": (1.0, None, "d")}
    assert set(attempt_tasks(signed_run.state.candidates[SEED], [])) == {
        ("train", 1),
        ("gate", 1),
        ("sealed", 1),
    }
