"""The task-run budget (``budget.max_task_runs``): a child's worst case, and the charge of
the task runs that no certificate covers.

Every task a run executes counts. A certified attempt is charged as it starts, on the
writer (``evaluation_started.tasks``). A rollout's or a validate minibatch's ``run_train``
runs on a worker: :class:`TaskRunMeter` charges it with a ``tasks_run`` event, durable
before its tasks start, and refuses it when it would exceed what is left; the child is
then rejected at stage ``budget`` and the run ends ``budget_exhausted``. The count is a
fold of the signed archive, so ``status``, ``compare`` and a resumed run agree on it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rsiframe.api import SLOT_TABLE
from rsiframe.archive import events as E
from rsiframe.archive.log import Event
from rsiframe.archive.state import CHILD_SPLITS
from rsiframe.engine.budget import BudgetGuard, TaskCosts
from rsiframe.engine.evaluation import Stages, TaskRunner
from rsiframe.recipe.schema import Budget


class TaskRunsRefused(RuntimeError):
    """A minibatch or rollout would exceed ``budget.max_task_runs``."""


def task_costs(stages: Stages, ops: dict[str, Any]) -> TaskCosts:
    """A child's worst case: what its rollout and validate may run (as their operators
    declare, :meth:`rsiframe.api.Operator.max_task_runs`), each of its evaluation stages;
    and the sealed anchor's tasks."""
    train = len(stages.split.get("train", []))
    names = stages.splits or list(CHILD_SPLITS)
    runners = [op for slot, op in ops.items() if SLOT_TABLE[slot].runs_tasks]
    return TaskCosts(
        {n: len(stages.task_ids(n)) for n in names},
        tuple(names),
        sum(getattr(op, "max_task_runs", lambda n: n)(train) for op in runners),
        len(stages.split.get("sealed", [])),
    )


def budget_guard(budget: Budget, stages: Stages, ops: dict[str, Any]) -> BudgetGuard:
    """The run's budget checks, with the evaluations and task runs a child may need."""
    return BudgetGuard(budget, stages.evals_per_child, task_costs(stages, ops))


class TaskRunMeter:
    """Charges uncertified task runs before they start, from any thread."""

    def __init__(self, tasks: TaskRunner, guard: BudgetGuard, engine: Any) -> None:
        self.tasks = tasks
        self.guard = guard
        self.engine = engine  # its one writer appends the charge; its archive syncs it
        self.refused: dict[str, str] = {}  # candidate -> why its run was refused
        self._lock = threading.Lock()
        self._unfolded = 0  # charged, not yet folded into the state by the writer

    @classmethod
    def attach(cls, engine: Any) -> TaskRunMeter:
        """The meter of ``engine``'s run, reachable as ``engine.tasks.meter``."""
        meter = cls(engine.tasks, engine.budget, engine)
        engine.tasks.meter = meter
        engine.archive.listeners.append(meter._folded)
        return meter

    def run(self, cid: str, purpose: str, where: Path, task_ids: list[str]) -> list[dict[str, Any]]:
        """Rows of an uncertified run of ``where`` on ``task_ids`` (``purpose``: minibatch
        or rollout), charged first; :class:`TaskRunsRefused` when it would not fit."""
        n = len(task_ids)
        with self._lock:
            why = self.guard.refuse_task_runs(self.tasks.state, n, self._unfolded)
            if why is None:
                self._unfolded += n
        if why is not None:
            self.refused[cid] = why
            raise TaskRunsRefused(why)
        self._charge(E.TasksRun(id=cid, purpose=purpose, tasks=n))
        return self.tasks.rows(self.tasks.run(cid, purpose, where, task_ids))

    def _charge(self, event: E.EventData) -> None:
        """Append ``event`` on the writer and make it durable; wait for both."""
        engine, done = self.engine, threading.Event()

        def append() -> None:
            try:
                engine.emit(event)
                engine.archive.sync()  # on disk before the tasks it pays for start
            finally:
                done.set()

        if engine.inflight.on_writer():
            return append()
        engine.inflight.post(append)
        done.wait()

    def _folded(self, ev: Event) -> None:
        if ev.type == "tasks_run":
            with self._lock:
                self._unfolded = max(0, self._unfolded - int(ev.data["tasks"]))
