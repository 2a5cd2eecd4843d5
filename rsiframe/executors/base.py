"""The :class:`Executor` protocol: where an evaluation of a verified export runs.

The engine hands every evaluation (and rollout) to one executor with the same arguments
:func:`rsiframe.evaluators.registry.run_tasks` takes, and gets the same
:class:`~rsiframe.evaluators.base.EvaluationOutput` back, with ``executor`` saying where it
ran (the kind and the worker node; certificates record it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rsiframe.evaluators.base import EvaluationOutput, Evaluator, Put, TaskRun
from rsiframe.tasks.taskset import TaskSet


class Executor(Protocol):
    kind: str

    def run(
        self,
        evaluator: Evaluator,
        taskset: TaskSet,
        candidate_dir: Path,
        task_ids: list[str],
        put: Put,
        on_done: Callable[[TaskRun], None] | None = None,
        **hooks: Any,
    ) -> EvaluationOutput: ...

    def cancel_all(self) -> None:
        """Kill every evaluation still running elsewhere (Ctrl-C after its grace period)."""

    def close(self) -> None: ...
