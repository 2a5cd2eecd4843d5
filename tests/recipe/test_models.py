"""models: in the recipe: validation, references, missing environment, one line on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rsiframe.errors import RecipeError
from rsiframe.recipe.models import ModelSpec, Price, check_models
from tests.support.paths import REPO


def _spec(**kw) -> ModelSpec:
    return ModelSpec.model_validate({"base_url": "http://x/v1", "model": "m", **kw})


def test_price_cost_and_url_rules() -> None:
    assert Price(input_per_mtok=1.0, output_per_mtok=2.0).cost(1_000_000, 500_000) == 2.0
    with pytest.raises(ValueError, match="exactly one of base_url"):
        ModelSpec.model_validate({"model": "m"})
    with pytest.raises(ValueError, match="exactly one of base_url"):
        ModelSpec.model_validate({"model": "m", "base_url": "u", "base_url_env": "U"})
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        _spec(price={"input_per_mtok": -1})


def test_resolve_reads_env_and_never_prints_the_key() -> None:
    spec = ModelSpec.model_validate({"base_url_env": "U", "api_key_env": "K", "model": "m"})
    r = spec.resolve({"U": "http://h/v1/", "K": "sk-secret"})
    assert (r.base_url, r.api_key) == ("http://h/v1", "sk-secret")
    assert "sk-secret" not in repr(r)
    with pytest.raises(RecipeError, match="K"):
        spec.resolve({"U": "http://h/v1"})


def test_check_models_resolves_references_and_names_missing_env() -> None:
    models = {"p": _spec(api_key_env="P_KEY"), "unused": _spec(api_key_env="NOPE")}
    configs = {"mutate": {"model": "p", "retries": 2}, "reflect": {"lessons_model": "p"}}
    ok = check_models(models, configs, {"P_KEY": "k"})
    assert ok.references == {
        "slots.mutate.config.model": "p",
        "slots.reflect.config.lessons_model": "p",
    }
    with pytest.raises(RecipeError, match=r"models.p needs P_KEY") as exc:
        check_models(models, configs, {})
    assert "NOPE" not in str(exc.value)  # only referenced models must be reachable
    with pytest.raises(RecipeError, match=r"slots.mutate.config.model: unknown model 'q'"):
        check_models(models, {"mutate": {"model": "q"}}, {"P_KEY": "k"})


def _recipe_with(tmp_path: Path, models: dict) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "sat3-quickstart.yaml").read_text())
    data["seed"] = str(REPO / "tasks" / "sat3" / "seed")
    data["tasks"]["path"] = str(REPO / "tasks" / "sat3")
    data["models"] = models
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rsiframe.cli.main", "recipe", "check", str(path)],
        capture_output=True,
        text=True,
    )


def test_recipe_check_negative_price_is_one_line_exit_2(tmp_path: Path) -> None:
    path = _recipe_with(
        tmp_path, {"p": {"base_url": "http://x/v1", "model": "m", "price": {"output_per_mtok": -2}}}
    )
    r = _check(path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1
    assert "models.p.price.output_per_mtok" in r.stderr


def _check_hill_climb(env: dict[str, str], *sets: str) -> subprocess.CompletedProcess:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("LLM_")}
    args = [f"--set={s}" for s in sets]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rsiframe.cli.main",
            "recipe",
            "check",
            "--json",
            str(REPO / "recipes" / "llm-hill-climb.yaml"),
            *args,
        ],
        capture_output=True,
        text=True,
        env={**base, **env},
    )


def test_llm_hill_climb_names_its_variables_up_front() -> None:
    r = _check_hill_climb({})
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "models.proposer needs LLM_BASE_URL, LLM_API_KEY" in r.stderr
    ok = _check_hill_climb({"LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_API_KEY": "k"})
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["models"]["references"] == {
        "evaluator.config.model": "proposer",
        "slots.mutate.config.model": "proposer",
        "slots.reflect.config.model": "proposer",
    }


def test_an_unknown_model_name_is_one_line_exit_2() -> None:
    env = {"LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_API_KEY": "k"}
    r = _check_hill_climb(env, "slots.mutate.config.model=nope")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "slots.mutate.config.model: unknown model 'nope'; declared: proposer" in r.stderr
