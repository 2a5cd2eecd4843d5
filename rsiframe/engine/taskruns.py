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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rsiframe.api import SLOT_TABLE
from rsiframe.archive import events as E
from rsiframe.archive.state import CHILD_SPLITS
from rsiframe.engine.budget import BudgetGuard, TaskCosts
from rsiframe.engine.evaluation import Stages, TaskRunner
from rsiframe.engine.hooks import Notice
from rsiframe.engine.inflight import Inflight
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

    def __init__(
        self,
        tasks: TaskRunner,
        guard: BudgetGuard,
        emit: Callable[[E.EventData], object],
        sync: Callable[[], None],
        inflight: Inflight,
    ) -> None:
        """``emit`` and ``sync``: the run's one writer appends the charge and makes it
        durable; ``inflight``: how a worker's charge reaches that writer."""
        self.tasks = tasks
        self.guard = guard
        self.emit = emit
        self.sync = sync
        self.inflight = inflight
        self.refused: dict[str, str] = {}  # candidate -> why its run was refused
        self._lock = threading.Lock()
        self._unfolded = 0  # charged, not yet folded into the state by the writer

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
        self._charge(E.TasksRun(id=cid, purpose=purpose, tasks=n, task_ids=list(task_ids)))
        return self.tasks.rows(self.tasks.run(cid, purpose, where, task_ids))

    def _charge(self, event: E.EventData) -> None:
        """Append ``event`` on the writer and make it durable; wait for both."""
        done = threading.Event()

        def append() -> None:
            try:
                self.emit(event)
                self.sync()  # on disk before the tasks it pays for start
            finally:
                done.set()

        if self.inflight.on_writer():
            return append()
        self.inflight.post(append)
        done.wait()

    def on_charged(self, notice: Notice) -> None:
        """A hook (``TASK_RUNS_CHARGED``): the writer folded a charge into the state."""
        assert isinstance(notice.data, E.TasksRun)
        with self._lock:
            self._unfolded = max(0, self._unfolded - notice.data.tasks)
