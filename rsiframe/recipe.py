"""Recipes: YAML files that bind operators to slots, validated and frozen.

``extends:`` deep-merges a base recipe (paths in each file are relative to
that file); ``--set a.b.c=value`` overrides one key, parsed as YAML. When a
slot's operator changes and no config is given with it, the inherited config
is dropped, so ``--set slots.select.operator=tournament`` is a whole ablation.
The resolved recipe (defaults filled in, paths absolute) is hashed; that
digest is what certificates bind and what ``resume`` checks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rsiframe import yamlsafe
from rsiframe.api import OPTIONAL_SLOTS, REQUIRED_SLOTS, Operator
from rsiframe.digest import sha256_json
from rsiframe.errors import RecipeError
from rsiframe.evaluator import ENGINES
from rsiframe.registry import resolve
from rsiframe.schema import Recipe

PATH_KEYS = (("seed",), ("tasks", "path"))


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


def _absolutize(data: dict[str, Any], base: Path) -> None:
    for keys in PATH_KEYS:
        node: Any = data
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(keys[-1]), str):
            node[keys[-1]] = str((base / node[keys[-1]]).resolve())
    slots = data.get("slots")
    if isinstance(slots, dict):
        for spec in slots.values():
            op = spec.get("operator") if isinstance(spec, dict) else None
            if isinstance(op, str) and ":" in op and not op.startswith("candidate:"):
                target, _, attr = op.rpartition(":")
                if target.endswith(".py") or "/" in target:
                    spec["operator"] = f"{(base / target).resolve()}:{attr}"


def merge(base: dict[str, Any], over: dict[str, Any], path: tuple[str, ...] = ()) -> dict[str, Any]:
    """Deep merge: mappings merge, everything else is replaced by ``over``."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        here = (*path, key)
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            if len(here) == 2 and here[0] == "slots":
                value = dict(value)
                if (
                    "operator" in value
                    and value["operator"] != old.get("operator")
                    and ("config" not in value)
                ):
                    old = {k: v for k, v in old.items() if k != "config"}
                out[key] = merge(old, value, here)
            else:
                out[key] = merge(old, value, here)
        else:
            out[key] = copy.deepcopy(value)
    return out


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
    _absolutize(data, path.parent)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise RecipeError("extends: must be a path to a recipe file", where=str(path))
    base_path = path.parent / parent
    if not base_path.is_file():
        raise RecipeError(f"extends: base recipe not found: {base_path}", where=str(path))
    return merge(_load_tree(base_path, (*chain, path)), data)


def parse_set(item: str) -> tuple[list[str], Any]:
    key, eq, raw = item.partition("=")
    if not eq or not key.strip():
        raise RecipeError(f"--set expects KEY=VALUE, got {item!r}")
    try:
        value = yamlsafe.load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def overrides(items: list[str], cwd: Path) -> dict[str, Any]:
    """Turn ``--set`` items into one mapping to merge over the recipe."""
    over: dict[str, Any] = {}
    for item in items:
        keys, value = parse_set(item)
        node = over
        for k in keys[:-1]:
            nxt = node.setdefault(k, {})
            if not isinstance(nxt, dict):
                raise RecipeError(f"--set {item}: {k} is set to a value and a mapping")
            node = nxt
        node[keys[-1]] = value
    _absolutize(over, cwd)
    return over


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join("validate" if p == "validate_" else str(p) for p in loc)


def _first_error(exc: ValidationError, prefix: str = "") -> tuple[str, str]:
    err = exc.errors()[0]
    loc = _dotted(tuple(err["loc"]))
    msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
    extra = len(exc.errors()) - 1
    if extra:
        msg += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    path = ".".join(p for p in (prefix, loc) if p)
    return path, msg


def load(path: Path, sets: list[str] | None = None, cwd: Path | None = None) -> ResolvedRecipe:
    """Load, merge, override, validate and resolve a recipe file."""
    path = Path(path)
    raw = _load_tree(path, ())
    if sets:
        raw = merge(raw, overrides(sets, cwd or Path.cwd()))
    return from_data(raw, path)


def from_data(raw: dict[str, Any], source: Path) -> ResolvedRecipe:
    where = str(source)
    try:
        recipe = Recipe.model_validate(raw)
    except ValidationError as exc:
        loc, msg = _first_error(exc)
        raise RecipeError(f"{loc}: {msg}" if loc else msg, where=where) from exc

    operators: dict[str, tuple[type[Operator], BaseModel]] = {}
    for slot in (*REQUIRED_SLOTS, *OPTIONAL_SLOTS):
        spec = recipe.slots.get(slot)
        if spec is None:
            continue
        try:
            cls = resolve(slot, spec.operator, source.parent)
        except RecipeError as exc:
            raise RecipeError(f"slots.{slot}.operator: {exc.message}", where=where) from exc
        try:
            config = cls.Config.model_validate(spec.config)
        except ValidationError as exc:
            loc, msg = _first_error(exc, f"slots.{slot}.config")
            raise RecipeError(f"{loc}: {msg}", where=where) from exc
        operators[slot] = (cls, config)

    engine = ENGINES.get(recipe.evaluator.engine)
    if engine is None:
        raise RecipeError(
            f"evaluator.engine: unknown engine {recipe.evaluator.engine!r}; "
            f"available: {', '.join(sorted(ENGINES))}",
            where=where,
        )
    try:
        evaluator_config = engine[0].model_validate(recipe.evaluator.config)
    except ValidationError as exc:
        loc, msg = _first_error(exc, "evaluator.config")
        raise RecipeError(f"{loc}: {msg}", where=where) from exc

    data = recipe.model_dump(mode="json", by_alias=True, exclude_none=False)
    for slot, (_cls, config) in operators.items():
        data["slots"][slot]["config"] = config.model_dump(mode="json")
    data["slots"] = {k: v for k, v in data["slots"].items() if v is not None}
    data["evaluator"]["config"] = evaluator_config.model_dump(mode="json")
    if not data["models"]:  # a recipe without models keeps the digest it had before them
        del data["models"]
    return ResolvedRecipe(
        recipe=recipe,
        source=source,
        data=data,
        digest=sha256_json(data),
        operators=operators,
        evaluator_config=evaluator_config,
    )


def dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
