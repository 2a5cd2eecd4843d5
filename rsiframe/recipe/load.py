"""Recipes: YAML files that bind operators to slots, validated and frozen.

``extends:`` deep-merges a base recipe, or a list of them in order (paths in each file
are relative to that file); ``--set a.b.c=value`` overrides one key, parsed as YAML. A
*method* file (``kind: method``, :class:`~rsiframe.recipe.schema.Method`) holds only what
a method decides; a recipe that extends one (``extends: [target.yaml, method.yaml]``, or
``--method``) runs its target with that method (:func:`with_method`). The merge
rules (an operator switch replaces the slot's config, ``null`` removes a
mapping, a ``--set`` mapping replaces) live in :mod:`rsiframe.recipe.overrides`.
The resolved recipe (defaults filled in, paths absolute) is hashed; that
digest is what certificates bind and what ``resume`` checks.
"""

from __future__ import annotations

import copy
import difflib
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
from rsiframe.recipe.schema import METHOD_KEYS, Method, Recipe
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


#: where ``--method NAME`` finds a method: the shipped method files of this checkout
METHODS_DIR = Path(__file__).resolve().parents[2] / "recipes" / "methods"


@dataclass
class _Tree:
    """One file's recipe tree with its ``extends:`` merged in."""

    data: dict[str, Any]
    path: Path
    method: bool  # a method file (``kind: method``)


def _load_tree(path: Path, chain: tuple[Path, ...]) -> _Tree:
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
    if data.get("kind", "method") != "method":
        raise RecipeError("kind: only 'method' is known (a recipe has no kind)", where=str(path))
    absolutize(data, path.parent)
    bases = [_load_tree(p, (*chain, path)) for p in _extends(data.pop("extends", None), path)]
    if data.get("kind") == "method":
        return _method_tree(data, bases, path)
    tree: dict[str, Any] = {}
    method: Path | None = None
    for b in bases:  # in order: the target first, then the method it runs
        if b.method:
            tree, method = with_method(tree, b.data), b.path
        elif method is not None:
            raise RecipeError(
                f"extends: {b.path.name} comes after the method {method.name}; list the target "
                f"first: extends: [{b.path.name}, {method.name}]",
                where=str(path),
            )
        else:
            tree = merge(tree, b.data)
    return _Tree(merge(tree, data), path, False)


def _method_tree(data: dict[str, Any], bases: list[_Tree], path: Path) -> _Tree:
    """A method file: its bases (methods only) merged in order, then the file, checked."""
    recipes = [b.path.name for b in bases if not b.method]
    if recipes:
        raise RecipeError(
            f"extends: a method extends methods only ({recipes[0]} is a recipe)", where=str(path)
        )
    tree: dict[str, Any] = {}
    for b in (*bases, _Tree(data, path, True)):
        tree = merge(tree, b.data)
    check_method(tree, path)
    return _Tree(tree, path, True)


def _extends(value: Any, path: Path) -> list[Path]:
    """The files ``extends:`` names (one path, or a list merged in order)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) for i in items):
        raise RecipeError(
            "extends: must be a path to a recipe file or a list of them", where=str(path)
        )
    found = [path.parent / i for i in items]
    for base in found:
        if not base.is_file():
            raise RecipeError(f"extends: base recipe not found: {base}", where=str(path))
    return found


def with_method(recipe: dict[str, Any], method: dict[str, Any]) -> dict[str, Any]:
    """A target recipe run with a method: the method's slots and evaluation stages replace
    the target's (the target's operators are its own baseline method, not part of the
    task set); its budget, children_per_generation, models and information merge over the
    target's, so what the method leaves unsaid stays the target's."""
    out = {k: v for k, v in recipe.items() if k != "slots"}
    if isinstance(out.get("evaluator"), dict):
        out["evaluator"] = {k: v for k, v in out["evaluator"].items() if k != "stages"}
    out = merge(out, {k: v for k, v in method.items() if k not in ("kind", "slots")})
    out["slots"] = copy.deepcopy(method.get("slots", {}))
    return out


def check_method(tree: dict[str, Any], path: Path) -> Method:
    """A method file holds only what the method decides (:class:`Method`), nothing of a
    target: a seed, tasks, surface or evaluator setting would ride along onto every target
    the method runs on (and make its runs incomparable with the target's own)."""
    extra = [k for k in tree if k not in METHOD_KEYS]
    evaluator = tree.get("evaluator")
    if isinstance(evaluator, dict):
        extra += [f"evaluator.{k}" for k in evaluator if k != "stages"]
    if extra:
        raise RecipeError(
            f"{extra[0]}: belongs to the target recipe, not a method (a method holds "
            f"{', '.join(k for k in METHOD_KEYS if k != 'evaluator')} and evaluator.stages)",
            where=str(path),
        )
    try:
        return Method.model_validate(tree)
    except ValidationError as exc:
        loc, msg = first_error(exc, model=Method)
        raise RecipeError(f"{loc}: {msg}" if loc else msg, where=str(path)) from exc


def method_path(ref: str | Path, cwd: Path | None = None) -> Path:
    """``--method``: a shipped method's name (``gepa``: recipes/methods/gepa.yaml) or the
    path of a method file."""
    text = str(ref)
    if "/" in text or text.endswith((".yaml", ".yml")):
        path = Path(text) if Path(text).is_absolute() else (cwd or Path.cwd()) / text
        if not path.is_file():
            raise RecipeError(f"--method: no such file: {path}")
        return path
    path = METHODS_DIR / f"{text}.yaml"
    if path.is_file():
        return path
    known = sorted(p.stem for p in METHODS_DIR.glob("*.yaml")) if METHODS_DIR.is_dir() else []
    close = difflib.get_close_matches(text, known, n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    shipped = ", ".join(known) or f"none in {METHODS_DIR}"
    raise RecipeError(
        f"--method: unknown method {text!r}{hint}; shipped: {shipped}; or give a method file"
    )


def method_ref(path: Path) -> str:
    """How ``--method`` names a method file: a shipped one by its name, others by path."""
    path = Path(path)
    shipped = path.resolve().parent == METHODS_DIR and path.suffix == ".yaml"
    return path.stem if shipped else str(path)


def load_method(ref: str | Path, cwd: Path | None = None) -> dict[str, Any]:
    """The tree of the method ``ref`` names (``--method``), checked to be a method."""
    tree = _load_tree(method_path(ref, cwd), ())
    if not tree.method:
        raise RecipeError(f"--method: {tree.path} is a recipe, not a method (kind: method)")
    return tree.data


def load(
    path: Path,
    sets: list[str] | None = None,
    cwd: Path | None = None,
    unsets: list[str] | None = None,
    method: str | Path | None = None,
) -> ResolvedRecipe:
    """Load, merge, override, validate and resolve a recipe file; ``method`` (a shipped
    method's name or a method file) runs the recipe's target with that method.

    With overrides, the run's name says what they changed (``name[select=best]``)
    unless they set ``name`` themselves.
    """
    path = Path(path)
    tree = _load_tree(path, ())
    if tree.method:
        raise RecipeError(
            f"a method, not a recipe: run it on your task set with `rsiframe run TARGET.yaml "
            f"--method {method_ref(path)}` or a recipe `extends: [TARGET.yaml, {path}]`",
            where=str(path),
        )
    raw = tree.data
    if method is not None:
        raw = with_method(raw, load_method(method, cwd))
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
    operators = _operators(recipe.slots, source)
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


def _operators(slots: Any, source: Path) -> dict[str, tuple[type[Operator], BaseModel]]:
    """Every slot's operator found and its config validated."""
    operators: dict[str, tuple[type[Operator], BaseModel]] = {}
    for slot in (*REQUIRED_SLOTS, *OPTIONAL_SLOTS):
        spec = slots.get(slot)
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


def is_method_file(path: Path) -> bool:
    """Whether ``path`` is a method file (``kind: method``); False when it cannot be read
    (loading it then says why)."""
    try:
        data = load_yaml(Path(path))
    except RecipeError:
        return False
    return isinstance(data, dict) and data.get("kind") == "method"


def check_method_file(path: Path) -> tuple[Method, dict[str, str]]:
    """A method file checked alone (``recipe check``): what it holds, its operators found
    and their configs valid; the method and each slot's operator."""
    tree = _load_tree(Path(path), ())
    method = check_method(tree.data, tree.path)
    operators = _operators(method.slots, tree.path)
    chosen = {slot: method.slots.get(slot) for slot in operators}
    return method, {slot: c.operator for slot, c in chosen.items() if c is not None}


def dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
