"""Recipes: YAML files that bind operators to slots, validated and frozen.

``extends:`` deep-merges a base recipe (paths in each file are relative to
that file); ``--set a.b.c=value`` overrides one key, parsed as YAML. The merge
rules (an operator switch replaces the slot's config, ``null`` removes a
mapping, a ``--set`` mapping replaces) live in :mod:`rsiframe.recipe.overrides`.
The resolved recipe (defaults filled in, paths absolute) is hashed; that
digest is what certificates bind and what ``resume`` checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rsiframe import yamlsafe
from rsiframe.api import OPTIONAL_SLOTS, REQUIRED_SLOTS, Operator
from rsiframe.errors import RecipeError
from rsiframe.recipe.evaluator import ENGINES
from rsiframe.recipe.executor import ExecutorSpec
from rsiframe.recipe.overrides import absolutize, labelled, merge, overrides, run_label
from rsiframe.recipe.schema import Recipe
from rsiframe.slots.registry import resolve
from rsiframe.util.digest import sha256_json
from rsiframe.util.validation import first_error


@dataclass
class ResolvedRecipe:
    """A validated recipe with its operators found and their configs parsed."""

    recipe: Recipe
    source: Path
    data: dict[str, Any]  # the frozen, JSON-ready form
    digest: str
    operators: dict[str, tuple[type[Operator], BaseModel]]
    evaluator_config: BaseModel


# -- YAML -----------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise RecipeError("file not found", where=str(path)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise RecipeError(f"cannot read: {exc}", where=str(path)) from exc
    try:
        return yamlsafe.load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        where = f"{path}: line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        raise RecipeError(f"invalid YAML: {problem}", where=where) from exc


def _load_tree(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    path = path.resolve()
    if path in chain:
        raise RecipeError(
            "extends: cycle " + " -> ".join(p.name for p in (*chain, path)), where=str(chain[0])
        )
    data = load_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise RecipeError("a recipe must be a YAML mapping", where=str(path))
    absolutize(data, path.parent)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise RecipeError("extends: must be a path to a recipe file", where=str(path))
    base_path = path.parent / parent
    if not base_path.is_file():
        raise RecipeError(f"extends: base recipe not found: {base_path}", where=str(path))
    return merge(_load_tree(base_path, (*chain, path)), data)


def load(
    path: Path,
    sets: list[str] | None = None,
    cwd: Path | None = None,
    unsets: list[str] | None = None,
) -> ResolvedRecipe:
    """Load, merge, override, validate and resolve a recipe file.

    With overrides, the run's name says what they changed (``name[select=best]``)
    unless they set ``name`` themselves.
    """
    path = Path(path)
    raw = _load_tree(path, ())
    if sets or unsets:
        raw = merge(raw, overrides(list(sets or []), cwd or Path.cwd(), unsets or []))
        if isinstance(raw.get("name"), str):
            raw["name"] = labelled(raw["name"], run_label(list(sets or []), unsets or []))
    return from_data(raw, path)


def from_data(raw: dict[str, Any], source: Path) -> ResolvedRecipe:
    where = str(source)
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as exc:
        loc, msg = first_error(exc, model=Recipe)
        raise RecipeError(f"{loc}: {msg}" if loc else msg, where=where) from exc
    operators = _operators(recipe, source)
    evaluator_config = _evaluator_config(recipe, where)
    data = _frozen(recipe, operators, evaluator_config)
    return ResolvedRecipe(
        recipe=recipe,
        source=source,
        data=data,
        digest=sha256_json(data),
        operators=operators,
        evaluator_config=evaluator_config,
    )


def _operators(recipe: Recipe, source: Path) -> dict[str, tuple[type[Operator], BaseModel]]:
    """Each filled slot's operator class and its validated config."""
    operators: dict[str, tuple[type[Operator], BaseModel]] = {}
    for slot in (*REQUIRED_SLOTS, *OPTIONAL_SLOTS):
        spec = recipe.slots.get(slot)
        if spec is None:
            continue
        try:
            cls = resolve(slot, spec.operator, source.parent)
        except RecipeError as exc:
            raise RecipeError(f"slots.{slot}.operator: {exc.message}", where=str(source)) from exc
        try:
            config = cls.Config.model_validate(spec.config)
        except ValidationError as exc:
            loc, msg = first_error(exc, f"slots.{slot}.config", cls.Config)
            raise RecipeError(f"{loc}: {msg}", where=str(source)) from exc
        operators[slot] = (cls, config)
    return operators


def _evaluator_config(recipe: Recipe, where: str) -> BaseModel:
    engine = ENGINES.get(recipe.evaluator.engine)
    if engine is None:
        raise RecipeError(
            f"evaluator.engine: unknown engine {recipe.evaluator.engine!r}; "
            f"available: {', '.join(sorted(ENGINES))}",
            where=where,
        )
    try:
        return engine.config.model_validate(recipe.evaluator.config)
    except ValidationError as exc:
        loc, msg = first_error(exc, "evaluator.config", engine.config)
        raise RecipeError(f"{loc}: {msg}", where=where) from exc


def _frozen(
    recipe: Recipe,
    operators: dict[str, tuple[type[Operator], BaseModel]],
    evaluator_config: BaseModel,
) -> dict[str, Any]:
    """The resolved recipe as data (what is hashed): every default filled in, and the keys
    added since older runs began left out while they hold their default, so those runs
    keep their digest."""
    data = recipe.model_dump(mode="json", by_alias=True, exclude_none=False)
    for slot, (_cls, config) in operators.items():
        data["slots"][slot]["config"] = config.model_dump(mode="json")
    data["slots"] = {k: v for k, v in data["slots"].items() if v is not None}
    data["evaluator"]["config"] = evaluator_config.model_dump(mode="json")
    if recipe.evaluator.executor == ExecutorSpec():  # the default leaves the digest as it was
        del data["evaluator"]["executor"]
    if not data["models"]:  # a recipe without models keeps the digest it had before them
        del data["models"]
    if "concurrency" not in recipe.model_fields_set:  # runs from before the key keep their digest
        data.pop("concurrency", None)
    return data


def dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
