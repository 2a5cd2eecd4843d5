"""Fixtures for the engine's steps without a run: the mini task set loaded, and a
``TaskRunner`` over an evaluator and an executor that run nothing (tests/support/fakes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.engine.budget import BudgetGuard
from rsiframe.engine.evaluation import TaskRunner
from rsiframe.recipe.schema import Budget
from rsiframe.slots.calls import Timings
from rsiframe.tasks.taskset import TaskSet
from tests.support.fakes import RecordingExecutor, ScriptedEvaluator
from tests.support.mini import write_tasks
from tests.support.runlog import SignedRun
from tests.support.store import Store


@pytest.fixture
def taskset(tmp_path: Path) -> TaskSet:
    """The mini task set (t1 .. t10), loaded."""
    write_tasks(tmp_path / "tasks", 10)
    return TaskSet.load(tmp_path / "tasks")


@pytest.fixture
def task_runner(signed_run: SignedRun, taskset: TaskSet, tmp_path: Path) -> TaskRunner:
    """The engine's TaskRunner: t1-t3 score 1, the rest 0; evidence goes to ``signed_run``."""

    def export(name: str, commit: str, tree: str) -> Path:
        folder = tmp_path / "exports" / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    return TaskRunner(
        ScriptedEvaluator({"t1": 1.0, "t2": 1.0, "t3": 1.0}),
        taskset,
        Store().put,
        signed_run.emit,
        export,
        BudgetGuard(Budget()),
        signed_run.state,
        Timings(),
        RecordingExecutor(),
    )
