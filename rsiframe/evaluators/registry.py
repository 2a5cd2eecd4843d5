"""Evaluator engines by name: each imported only when a run, a check or a reproduction asks
for it (the table is :data:`rsiframe.recipe.evaluator.ENGINES`), with an error that names
what to install. The one way the framework runs tasks (:func:`run_tasks`) and the parts of
the evaluator lock.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rsiframe.errors import EngineUnavailable, LockMismatch
from rsiframe.evaluators.base import EvaluationOutput, Evaluator, Put, TaskRun
from rsiframe.recipe.evaluator import ENGINES, EngineSpec
from rsiframe.tasks.taskset import TaskSet


def _attr(ref: str, spec: EngineSpec, name: str) -> Any:
    module, _, attr = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        hint = f"; install it with: {spec.install}" if spec.install else ""
        raise EngineUnavailable(f"the {name!r} evaluator engine cannot load ({exc}){hint}") from exc


def engine_class(name: str) -> type:
    """The engine's class, imported now (:class:`EngineUnavailable` names what to install)."""
    spec = ENGINES[name]
    cls: type = _attr(f"{spec.module}:{spec.cls}", spec, name)
    return cls


def preflight_engine(engine: str, config: BaseModel, taskset: TaskSet, task_ids: list[str]) -> None:
    """The engine's own preflight (Harbor: its environment starts, it accepts the tasks);
    imports only that engine's preflight module."""
    spec = ENGINES[engine]
    check: Callable[[Any, TaskSet, list[str]], None] = _attr(spec.preflight, spec, engine)
    check(config, taskset, task_ids)


def build_evaluator(engine: str, config: BaseModel, work: Path, **options: Any) -> Evaluator:
    """An evaluator of a validated config; ``options`` (``parallel``: evaluations in flight,
    ``cache_root``: a build cache of its own) go to the engines that take them
    (``EngineSpec.options``) and are dropped for the others, which have nothing to share."""
    taken = {k: v for k, v in options.items() if k in ENGINES[engine].options and v is not None}
    evaluator: Evaluator = engine_class(engine)(config, work, **taken)
    return evaluator


def make_evaluator(
    engine: str, config: dict[str, Any], work: Path, cache_root: Path | None = None
) -> Evaluator:
    """An evaluator from a frozen recipe's ``evaluator`` section (``verify --reproduce``,
    a Ray worker); ``cache_root``: a build cache of its own instead of the shared one."""
    spec = ENGINES.get(engine)
    if spec is None:
        raise LockMismatch(f"the run's evaluator engine {engine!r} is not installed here")
    try:
        parsed = spec.config.model_validate(config)
    except ValidationError as exc:
        raise LockMismatch(
            f"the run's evaluator config is not valid here: {exc.errors()[0]['msg']}"
        ) from exc
    return build_evaluator(engine, parsed, work, cache_root=cache_root)


def run_tasks(
    evaluator: Evaluator,
    taskset: TaskSet,
    candidate_dir: Path,
    task_ids: list[str],
    put: Put,
    on_done: Callable[[TaskRun], None] | None = None,
    **hooks: Any,
) -> EvaluationOutput:
    """Run ``task_ids`` on an exported candidate: the one way the framework runs tasks.

    ``hooks`` (``on_built``, ``on_usage``, ``token_limit``) reach a D/T/H evaluator's build
    and model server."""
    tasks = [taskset.tasks[t] for t in task_ids]
    return evaluator.run(candidate_dir, tasks, put, on_done, **hooks)


def evaluator_parts(engine: Evaluator) -> dict[str, Any]:
    """What evaluator.lock.json holds: the fingerprint and the parts it is made of."""
    return {"fingerprint": engine.fingerprint(), **engine.lock_parts()}


def evaluator_changes(now: dict[str, Any], locked: dict[str, Any]) -> list[str]:
    """The parts of ``now`` (:func:`evaluator_parts`) that differ from ``locked``; else ``code``."""
    changed = [k for k, v in now.items() if k != "fingerprint" and v != locked.get(k)]
    return changed or ["code"]
