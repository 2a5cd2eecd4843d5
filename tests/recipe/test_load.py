"""Recipe loading: extends, overrides, path resolution, validation and the frozen digest."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.errors import RecipeError
from rsiframe.recipe import load as recipe_mod
from rsiframe.recipe import overrides as overrides_mod
from tests.support.mini import make_mini


def test_merge_rules() -> None:
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    over = {"a": {"c": [3]}, "e": 2}
    assert overrides_mod.merge(base, over) == {"a": {"b": 1, "c": [3]}, "d": 1, "e": 2}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}  # inputs untouched


def test_set_values_are_parsed_as_yaml(tmp_path: Path) -> None:
    over = overrides_mod.overrides(
        ["a.b=4", "a.c=true", "a.d=[x, y]", "e=hello world", "f="], tmp_path
    )
    assert over == {"a": {"b": 4, "c": True, "d": ["x", "y"]}, "e": "hello world", "f": ""}


def test_set_paths_resolve_against_cwd(tmp_path: Path) -> None:
    over = overrides_mod.overrides(["seed=other/seed", "tasks.path=t"], tmp_path)
    assert over["seed"] == str(tmp_path / "other" / "seed")
    assert over["tasks"]["path"] == str(tmp_path / "t")


def test_three_level_extends_and_paths_relative_to_their_file(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "proj")
    (tmp_path / "ablations").mkdir()
    mid = tmp_path / "ablations" / "mid.yaml"
    mid.write_text("extends: ../proj/recipe.yaml\nchildren_per_generation: 5\n")
    top = tmp_path / "ablations" / "top.yaml"
    top.write_text("extends: mid.yaml\nname: top\nbudget: {max_candidates: 3}\n")
    r = recipe_mod.load(top)
    assert r.recipe.name == "top"
    assert r.recipe.children_per_generation == 5
    assert r.recipe.budget.max_candidates == 3
    assert r.recipe.budget.max_generations == 2  # kept from the base
    assert r.recipe.seed == mini.seed.resolve()
    assert r.recipe.tasks.path == mini.tasks.resolve()


def test_digest_is_stable_and_sensitive(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    a = recipe_mod.load(mini.recipe)
    b = recipe_mod.load(mini.recipe)
    assert a.digest == b.digest
    assert recipe_mod.load(mini.recipe, ["random_seed=8"]).digest != a.digest
    # defaults are filled in, so spelling a default out changes nothing (but the run's
    # name, which says what was overridden, unless the override names the run)
    same = ["slots.select.config.top_k=1", "name=mini"]
    assert recipe_mod.load(mini.recipe, same).digest == a.digest


def test_frozen_form_round_trips(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    a = recipe_mod.load(mini.recipe)
    frozen = tmp_path / "frozen.yaml"
    frozen.write_text(recipe_mod.dump(a.data))
    again = recipe_mod.from_data(recipe_mod.load_yaml(frozen), frozen)
    assert again.digest == a.digest and again.data == a.data


def test_operator_from_a_module_path(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    r = recipe_mod.load(mini.recipe, ["slots.gate.operator=rsiframe.operators.gate:Always"])
    assert r.operators["gate"][0].__name__ == "Always"
    with pytest.raises(RecipeError, match="is not a gate operator"):
        recipe_mod.load(mini.recipe, ["slots.gate.operator=rsiframe.operators.select:Best"])
    with pytest.raises(RecipeError, match="cannot import module"):
        recipe_mod.load(mini.recipe, ["slots.gate.operator=no.such.module:X"])


def test_operator_from_a_file_relative_to_the_recipe(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    (mini.root / "ops").mkdir()
    (mini.root / "ops" / "mine.py").write_text(
        "from pydantic import BaseModel\n"
        "from rsiframe.api import GateOperator, GateDecision\n"
        "class Cfg(BaseModel):\n"
        "    level: int = 1\n"
        "class Mine(GateOperator):\n"
        "    name = 'mine'\n"
        "    Config = Cfg\n"
        "    def gate(self, ctx):\n"
        "        return GateDecision(admit=True, reason='mine')\n"
    )
    text = mini.recipe.read_text().replace(
        "gate: {operator: improves_parent}",
        "gate: {operator: ops/mine.py:Mine, config: {level: 3}}",
    )
    mini.recipe.write_text(text)
    r = recipe_mod.load(mini.recipe)
    cls, cfg = r.operators["gate"]
    assert cls.__name__ == "Mine" and cfg.level == 3  # type: ignore[attr-defined]
    assert (
        r.data["slots"]["gate"]["operator"] == f"{(mini.root / 'ops' / 'mine.py').resolve()}:Mine"
    )
    with pytest.raises(RecipeError, match=r"slots\.gate\.config\.level"):
        recipe_mod.load(mini.recipe, ["slots.gate.config.level=high"])


def test_split_spec_validation(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    with pytest.raises(RecipeError, match="not both"):
        recipe_mod.load(mini.recipe, ["tasks.split.ratios={train: 0.5}"])
    no_lists = ["tasks.split.train=null", "tasks.split.gate=null", "tasks.split.sealed=null"]
    with pytest.raises(RecipeError, match="sum to at most 1"):
        recipe_mod.load(mini.recipe, [*no_lists, "tasks.split.ratios={train: 0.9, gate: 0.9}"])
    ok = recipe_mod.load(mini.recipe, [*no_lists, "tasks.split.ratios={train: 0.5, gate: 0.3}"])
    assert ok.recipe.tasks.split.lists() is None


def test_unknown_engine(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    with pytest.raises(RecipeError, match="unknown engine 'moon'"):
        recipe_mod.load(mini.recipe, ["evaluator.engine=moon"])
    with pytest.raises(RecipeError, match=r"evaluator\.config\.concurrency"):
        recipe_mod.load(mini.recipe, ["evaluator.config.concurrency=0"])
