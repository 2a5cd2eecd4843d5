"""Everything checked before a run folder is created (and all of ``recipe check``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rsiframe.errors import ModelUnavailable, RecipeError, TaskSetError
from rsiframe.evaluators.registry import preflight_engine
from rsiframe.executors.registry import check as check_executor
from rsiframe.executors.registry import session_spec
from rsiframe.recipe import load as recipe_mod
from rsiframe.recipe.executor import ExecutorSpec
from rsiframe.recipe.models import ModelCheck, ModelSpec, check_models
from rsiframe.repo.gittree import Snapshot, snapshot
from rsiframe.surface import Surface
from rsiframe.tasks.taskset import TaskSet, make_split

if TYPE_CHECKING:  # the check's gateway is imported only when a check runs (recipe check: never)
    from rsiframe.gateway.modelcheck import ModelPing


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
    #: each declared model's tiny call (``model_check``), metered apart from the run's budget
    pings: list[ModelPing] = field(default_factory=list)
    #: what is valid but likely not meant (``recipe check`` prints them)
    warnings: list[str] = field(default_factory=list)

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
    model_check: bool = False,
) -> Plan:
    """Every check before a run folder exists; ``replay``: the models need no endpoint (a
    replay's gateway answers only from the source run's archive); ``method``: the recipe's
    target run with that method (``--method``); ``model_check``: each declared model
    answers one tiny call (last, once everything else passed)."""
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
    pings = ping_or_refuse(r.models, where) if model_check and not replay else []
    return Plan(resolved, taskset, split, seed, executor, key, models, pings, warnings(resolved))


def warnings(resolved: recipe_mod.ResolvedRecipe) -> list[str]:
    """A deterministic model call (temperature 0) making the children of one parent: they
    would all be the same request, answered once and served from the gateway's cache, and
    every copy after the first is rejected as a duplicate without being evaluated. Only a
    temperature the recipe sets counts (a coding agent makes its own calls: its config's
    temperature reaches them only through a command's ``{temperature}``)."""
    r = resolved.recipe
    spec = resolved.operators.get("mutate")
    config = spec[1] if spec is not None else None
    chosen = "temperature" in getattr(config, "model_fields_set", ())
    if not chosen or getattr(config, "temperature", None) != 0:
        return []
    if not getattr(config, "model", None):
        return []
    kids, gens = r.children_per_generation, r.budget.max_generations
    if r.budget.max_candidates == 1 or (kids == 1 and gens == 1):
        return []  # one child in all: no parent gets two
    return [
        f"slots.mutate.config.temperature: 0 makes every child of one parent the same model "
        f"call (children_per_generation: {kids}; a parent may also be chosen again): the "
        "gateway answers the copies from its cache and they are rejected as `duplicate of "
        "<id>`, unevaluated; sample instead (e.g. temperature: 0.7)"
    ]


def ping_or_refuse(models: Mapping[str, ModelSpec], where: str | None) -> list[ModelPing]:
    """One tiny call to each declared model; ModelUnavailable (one line) when any fails."""
    from rsiframe.gateway.modelcheck import ping_models

    pings = ping_models(models)
    failed = [p for p in pings if not p.ok]
    if failed:
        why = "; ".join(f"model {p.model}: {p.detail}" for p in failed)
        raise ModelUnavailable(
            f"{why} (the check before the first generation; skip it with --no-model-check)",
            where=where,
        )
    return pings


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
