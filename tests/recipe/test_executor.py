"""rsiframe.recipe.executor: `evaluator.executor` in the recipe, and `--ray-address`."""

from __future__ import annotations

import pytest

from rsiframe.recipe import load as recipe_mod
from rsiframe.recipe.executor import ExecutorSpec, with_address
from tests.support.mini import Mini


def test_the_default_executor_leaves_the_recipe_digest_alone(mini: Mini) -> None:
    plain = recipe_mod.load(mini.recipe)
    # name=mini: a run made with --set is otherwise named for its overrides
    explicit = recipe_mod.load(mini.recipe, ["evaluator.executor.kind=local", "name=mini"])
    assert "executor" not in plain.data["evaluator"]
    assert explicit.digest == plain.digest
    ray = recipe_mod.load(mini.recipe, ["evaluator.executor.kind=ray"])
    assert ray.digest != plain.digest
    assert ray.data["evaluator"]["executor"]["resources"]["build"] == {
        "num_cpus": 2,
        "num_gpus": 0,
    }


def test_ray_address_sets_kind_and_is_validated() -> None:
    spec = with_address(ExecutorSpec(), "ray://head:10001")
    assert (spec.kind, spec.address) == ("ray", "ray://head:10001")
    assert with_address(spec, None) is spec
    with pytest.raises(ValueError):
        with_address(ExecutorSpec(), "head")
