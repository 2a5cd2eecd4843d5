"""Where an evaluation of a verified export runs: in this process, or on a Ray cluster.

The engine hands every evaluation (and rollout) to one :class:`Executor` with the same
arguments :func:`rsiframe.evaluators.local.run_tasks` takes, and gets the same
:class:`~rsiframe.evaluators.local.EvaluationOutput` back, with ``executor`` saying where it ran
(the kind and the worker node; certificates record it). ``local`` runs the evaluator here;
``ray`` (:mod:`rsiframe.executors.ray_driver`, the ``cluster`` extra) runs it as a Ray task on a
worker and keeps signing, the key and the archive on the driver.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from rsiframe.errors import ClusterError
from rsiframe.evaluators.local import EvaluationOutput, LocalEngine, Put, TaskRun, run_tasks
from rsiframe.recipe.executor import ExecutorSpec, with_address
from rsiframe.tasks.taskset import TaskSet


class Executor(Protocol):
    kind: str

    def run(
        self,
        evaluator: LocalEngine,
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


class LocalExecutor:
    """The evaluator runs in this process, on this host (the default)."""

    kind = "local"

    def run(
        self,
        evaluator: LocalEngine,
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


def session_spec(spec: ExecutorSpec, ray_address: str | None) -> tuple[ExecutorSpec, str]:
    """The recipe's executor with ``--ray-address`` applied, and the key errors name."""
    if ray_address is None:
        return spec, "evaluator.executor"
    try:
        return with_address(spec, ray_address), "--ray-address"
    except ValidationError as exc:
        raise ClusterError(f"--ray-address: {exc.errors()[0]['msg']}") from exc


def check(spec: ExecutorSpec, key: str = "evaluator.executor", engine: str = "local") -> None:
    """Preflight, before a run folder exists: Ray is installed and the address answers."""
    if spec.kind == "ray" and engine != "local":
        raise ClusterError(f"{key}: the Ray executor runs the local engine, not {engine!r}")
    if spec.kind == "ray":
        from rsiframe.executors import ray_driver as rayexec

        rayexec.probe(spec, key)


def open_executor(spec: ExecutorSpec, key: str = "evaluator.executor") -> Executor:
    """The executor a run uses this session (for ``ray``: connected, or a private instance)."""
    if spec.kind == "local":
        return LocalExecutor()
    from rsiframe.executors import ray_driver as rayexec

    return rayexec.RayExecutor(spec, key)
