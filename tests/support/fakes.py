"""An evaluator and an executor that run nothing, for unit tests of the engine's steps.

:class:`ScriptedEvaluator` implements :class:`rsiframe.evaluators.base.Evaluator` and
:class:`RecordingExecutor` implements :class:`rsiframe.executors.base.Executor`; the engine's
code under test is real (``TaskRunner``, ``evaluate``, ``TaskRunMeter``, ``Transaction``),
only where tasks would run is replaced: a reward per task id, or an error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rsiframe.evaluators.base import EvaluationOutput, Put, TaskRun
from rsiframe.tasks.taskset import Task, TaskSet


class ScriptedEvaluator:
    """Rewards by task id (``rewards``; 0 for the others); ``fail`` raises instead."""

    name = "scripted"
    builder = None  # no D/T/H build: no model, no tokens
    config = None  # no evaluator.config.model: no gateway endpoint

    def __init__(self, rewards: dict[str, float] | None = None) -> None:
        self.rewards = rewards or {}
        self.fail: Exception | None = None
        self.protected: dict[str, list[Task]] = {}
        self.runs: list[tuple[Path, list[str]]] = []

    @property
    def isolation(self) -> str:
        return "process"

    def protect(self, tasks: dict[str, list[Task]]) -> None:
        self.protected = tasks

    def lock_parts(self) -> dict[str, Any]:
        return {"engine": self.name}

    def fingerprint(self) -> str:
        return "e" * 64

    def record_part(self) -> dict[str, Any] | None:
        return None

    def run(
        self,
        candidate_dir: Path,
        tasks: list[Task],
        put: Put,
        on_done: Callable[[TaskRun], None] | None = None,
        **hooks: Any,
    ) -> EvaluationOutput:
        self.runs.append((candidate_dir, [t.id for t in tasks]))
        if self.fail is not None:
            raise self.fail
        out = EvaluationOutput()
        for t in tasks:
            reward = self.rewards.get(t.id, 0.0)
            digest = put(f"trajectory of {t.id}".encode())
            run = TaskRun(t.id, reward, None, {"agent": {}}, digest, 0.01)
            out.runs[t.id] = run
            out.task_seconds += run.seconds
            if on_done is not None:
                on_done(run)
        return out


class RecordingExecutor:
    """Runs the evaluator in this thread and records the task ids each call asked for."""

    kind = "recording"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.cancelled = 0

    def run(
        self,
        evaluator: Any,
        taskset: TaskSet,
        candidate_dir: Path,
        task_ids: list[str],
        put: Put,
        on_done: Callable[[TaskRun], None] | None = None,
        **hooks: Any,
    ) -> EvaluationOutput:
        self.calls.append(list(task_ids))
        tasks = [taskset.tasks[t] for t in task_ids]
        out = evaluator.run(candidate_dir, tasks, put, on_done, **hooks)
        out.executor = {"kind": self.kind, "node": "here"}
        return out

    def cancel_all(self) -> None:
        self.cancelled += 1

    def close(self) -> None:
        return None
