"""The ``local`` executor: the evaluator runs in this process, on this host (the default).
``ray`` (:mod:`rsiframe.executors.ray_driver`, the ``cluster`` extra) runs it as a Ray task
on a worker and keeps signing, the key and the archive on the driver."""

from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rsiframe.evaluators.base import EvaluationOutput, Evaluator, Put, TaskRun
from rsiframe.evaluators.registry import run_tasks
from rsiframe.tasks.taskset import TaskSet


class LocalExecutor:
    """The evaluator runs in this process, on this host (the default)."""

    kind = "local"

    def run(
        self,
        evaluator: Evaluator,
        taskset: TaskSet,
        candidate_dir: Path,
        task_ids: list[str],
        put: Put,
        on_done: Callable[[TaskRun], None] | None = None,
        **hooks: Any,
    ) -> EvaluationOutput:
        out = run_tasks(evaluator, taskset, candidate_dir, task_ids, put, on_done, **hooks)
        out.executor = {"kind": self.kind, "node": platform.node()}
        return out

    def cancel_all(self) -> None:
        """Nothing runs elsewhere: this host's sandboxes are killed by the caller."""

    def close(self) -> None:
        return None
