"""rsiframe.engine.preflight: every check before a run folder exists, on the mini project;
each refusal names the recipe file (and the key) it is about."""

from __future__ import annotations

import os

import pytest

from rsiframe.engine.preflight import plan
from rsiframe.errors import RecipeError, TaskSetError
from tests.support.mini import Mini


def test_a_recipe_that_passes_is_planned_with_its_split_seed_and_operators(mini: Mini) -> None:
    p = plan(mini.recipe)
    assert p.split == {
        "train": ["t1", "t3", "t5", "t7"],
        "gate": ["t2", "t4", "t6", "t8"],
        "sealed": ["t9", "t10"],
    }
    assert set(p.seed.entries) == {"agent.py", "config.yaml"}
    assert (p.executor.kind, p.executor_key) == ("local", "evaluator.executor")
    assert str(p).startswith("tasks: 4 train, 4 gate, 2 sealed; seed: 2 files; select=best")
    assert not p.models or not p.models.references


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        (("seed: seed", "seed: nowhere"), RecipeError, "seed: folder not found"),
        (
            ("include: [config.yaml]", "include: [nothing.yaml]"),
            RecipeError,
            "surface: the include globs match no file in the seed",
        ),
        (("gate: [t2, t4, t6, t8]", "gate: [t2, t4, t6, t99]"), TaskSetError, "t99"),
    ],
)
def test_a_refusal_names_the_recipe(
    mini: Mini, edit: tuple[str, str], error: type[Exception], message: str
) -> None:
    text = mini.recipe.read_text()
    assert edit[0] in text
    mini.recipe.write_text(text.replace(*edit))
    with pytest.raises(error) as info:
        plan(mini.recipe)
    assert message in str(info.value) and str(mini.recipe) in str(info.value)


def test_a_seed_the_repository_cannot_hold_is_refused(mini: Mini) -> None:
    os.mkfifo(mini.seed / "pipe")
    with pytest.raises(RecipeError, match="seed: pipe"):
        plan(mini.recipe)


def test_overrides_are_checked_like_the_file(mini: Mini) -> None:
    assert (
        plan(mini.recipe, ["budget.max_generations=5"]).resolved.recipe.budget.max_generations == 5
    )
    with pytest.raises(RecipeError, match="unknown select operator 'bset'"):
        plan(mini.recipe, ["slots.select.operator=bset"])
