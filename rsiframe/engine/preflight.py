"""Everything checked before a run folder is created (and all of ``recipe check``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rsiframe.errors import RecipeError, TaskSetError
from rsiframe.evaluators.registry import preflight_engine
from rsiframe.executors.registry import check as check_executor
from rsiframe.executors.registry import session_spec
from rsiframe.recipe import load as recipe_mod
from rsiframe.recipe.executor import ExecutorSpec
from rsiframe.recipe.models import ModelCheck, check_models
from rsiframe.repo.gittree import Snapshot, snapshot
from rsiframe.surface import Surface
from rsiframe.tasks.taskset import TaskSet, make_split


@dataclass
class Plan:
    """A recipe that passed every check, with what the run will be built from."""

    resolved: recipe_mod.ResolvedRecipe
    taskset: TaskSet
    split: dict[str, list[str]]
    seed: Snapshot
    executor: ExecutorSpec  # the recipe's, with --ray-address applied
    executor_key: str  # what errors about it name
    models: ModelCheck | None = None

    def __str__(self) -> str:
        sizes = ", ".join(f"{len(v)} {k}" for k, v in self.split.items())
        ops = ", ".join(
            f"{slot}={spec[0].name or spec[0].__name__}"
            for slot, spec in self.resolved.operators.items()
        )
        return f"tasks: {sizes}; seed: {len(self.seed.entries)} files; {ops}"


def plan(
    recipe_path: Path,
    sets: list[str] | None = None,
    ray_address: str | None = None,
    unsets: list[str] | None = None,
    *,
    replay: bool = False,
    method: str | Path | None = None,
) -> Plan:
    """Every check before a run folder exists; ``replay``: the models need no endpoint (a
    replay's gateway answers only from the source run's archive); ``method``: the recipe's
    target run with that method (``--method``)."""
    resolved = recipe_mod.load(recipe_path, sets, unsets=unsets, method=method)
    r = resolved.recipe
    executor, key = session_spec(r.evaluator.executor, ray_address)
    check_executor(executor, key, r.evaluator.engine)
    where = str(resolved.source)
    configs = {slot: cfg.model_dump() for slot, (_cls, cfg) in resolved.operators.items()}
    eval_model = evaluator_model(r.evaluator.engine, resolved.evaluator_config, r.models, where)
    if eval_model is not None and executor.kind != "local":
        raise RecipeError(
            f"evaluator.config.model: a candidate's agent reaches the run's gateway on this "
            f"host only; the {executor.kind} executor cannot give it one (use the local one)",
            where=where,
        )
    if eval_model is not None:  # its environment variables are checked like a slot's
        configs["evaluate"] = {"model": eval_model}
    models = check_models(r.models, configs, where=where, need_env=not replay)  # no call
    if eval_model is not None:  # named where the recipe says it
        models.references["evaluator.config.model"] = models.references.pop(
            "slots.evaluate.config.model"
        )
    taskset = TaskSet.load(r.tasks.path)
    try:
        split = make_split(
            sorted(taskset.tasks),
            lists=r.tasks.split.lists(),
            ratios=dict(r.tasks.split.ratios.items()) if r.tasks.split.ratios else None,
            seed=r.tasks.split.seed,
        )
    except TaskSetError as exc:  # a split problem is the recipe's: name its file and key
        raise TaskSetError(f"{exc.where}: {exc.message}", where=where) from exc
    if not r.seed.is_dir():
        raise RecipeError(f"seed: folder not found: {r.seed}", where=where)
    seed = snapshot(r.seed, r.surface.ignore)
    if seed.problems:
        path, why = seed.problems[0]
        raise RecipeError(f"seed: {path}: {why}", where=where)
    surface = Surface(tuple(r.surface.include), tuple(r.surface.exclude))
    if not surface.matching(seed.entries):
        raise RecipeError("surface: the include globs match no file in the seed", where=where)
    ids = [t for s in split.values() for t in s]
    preflight_engine(r.evaluator.engine, resolved.evaluator_config, taskset, ids)
    return Plan(resolved, taskset, split, seed, executor, key, models)


def evaluator_model(
    engine: str, config: object, models: Mapping[str, object], where: str
) -> str | None:
    """The declared model a candidate's agent reaches at evaluation (``evaluator.config.
    model``), checked; None when it has none. The ``harbor`` engine's ``model`` of a recipe
    without ``models:`` is a name Harbor's own agent resolves, not a declared model."""
    name = getattr(config, "model", None)
    if not isinstance(name, str) or (engine != "local" and not models):
        return None
    if name not in models:
        known = ", ".join(sorted(models)) or "none (add a models: section)"
        raise RecipeError(
            f"evaluator.config.model: unknown model {name!r}; declared: {known}", where=where
        )
    return name
