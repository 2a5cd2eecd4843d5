"""The local engine's preflight, before a run folder exists: with ``sandbox: docker``, each
task's image can be built offline (the Docker code is imported only then)."""

from __future__ import annotations

from rsiframe.recipe.evaluator import LocalEngineConfig
from rsiframe.tasks.taskset import TaskSet


def local(config: LocalEngineConfig, taskset: TaskSet, task_ids: list[str]) -> None:
    if config.sandbox != "docker":
        return
    from rsiframe.sandbox import taskimage

    taskimage.preflight({t: taskset.tasks[t].path for t in task_ids})
