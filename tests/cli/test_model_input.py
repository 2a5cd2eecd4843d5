"""Bad model input is one line and exit 2 from ``recipe check`` and ``run``, before any run
folder exists: an unknown model name, an unset key variable, a template that does not
compile, a negative price. (An unreachable endpoint and a model answering garbage need a
call: ``doctor``, tests/cli/test_doctor.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.cli import cli
from tests.support.paths import REPO

GOOD_MODEL = {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "BAD_INPUT_KEY", "model": "m"}


def _recipe(tmp_path: Path, models: dict, config: dict) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "sat3-quickstart.yaml").read_text())
    data["seed"] = str(REPO / "tasks" / "sat3" / "seed")
    data["tasks"]["path"] = str(REPO / "tasks" / "sat3")
    data["models"] = models
    data["slots"]["reflect"] = {"operator": "llm_lessons", "config": config}
    path = tmp_path / "recipes" / "r.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def _refused(recipe: Path, tmp_path: Path) -> str:
    """``recipe check`` and ``run`` both refuse with the same one line, exit 2, no folder."""
    check = cli("recipe", "check", recipe)
    assert check.exit_code == 2, check.stdout
    assert check.stderr.count("\n") == 1 and "Traceback" not in check.stderr
    out = tmp_path / "run"
    run = cli("run", recipe, "--out", out, "--quiet")
    assert run.exit_code == 2 and run.stderr == check.stderr
    assert not out.exists() and not run.stdout
    return check.stderr


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BAD_INPUT_KEY", "k")
    monkeypatch.delenv("BAD_INPUT_UNSET", raising=False)


def test_an_unknown_model_name(tmp_path: Path) -> None:
    err = _refused(_recipe(tmp_path, {"p": GOOD_MODEL}, {"model": "nope"}), tmp_path)
    assert "slots.reflect.config.model: unknown model 'nope'; declared: p" in err


def test_a_missing_key_variable(tmp_path: Path) -> None:
    model = {**GOOD_MODEL, "api_key_env": "BAD_INPUT_UNSET"}
    err = _refused(_recipe(tmp_path, {"p": model}, {"model": "p"}), tmp_path)
    assert "environment variable(s) not set: models.p needs BAD_INPUT_UNSET" in err


def test_a_negative_price(tmp_path: Path) -> None:
    model = {**GOOD_MODEL, "price": {"input_per_mtok": -0.5}}
    err = _refused(_recipe(tmp_path, {"p": model}, {"model": "p"}), tmp_path)
    assert "models.p.price.input_per_mtok" in err and "greater than or equal to 0" in err


def test_a_template_with_a_syntax_error(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, {"p": GOOD_MODEL}, {"model": "p", "template": "bad.j2"})
    (recipe.parent / "bad.j2").write_text("Lessons so far:\n{% for x in outcomes %}\n{{ x ")
    err = _refused(recipe, tmp_path)
    assert "slots.reflect.config.template" in err
    assert f"template {recipe.parent / 'bad.j2'}: line 3:" in err


def test_a_template_path_is_relative_to_the_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = _recipe(tmp_path, {"p": GOOD_MODEL}, {"model": "p", "template": "mine.j2"})
    (recipe.parent / "mine.j2").write_text("{{ notes }} lessons")
    monkeypatch.chdir(tmp_path)  # not the recipe's folder
    res = cli("recipe", "show", recipe, "--json")
    assert res.exit_code == 0, res.stderr
    assert '"template": "' + str(recipe.parent / "mine.j2") + '"' in res.stdout
    missing = _recipe(tmp_path, {"p": GOOD_MODEL}, {"model": "p", "template": "gone.j2"})
    err = _refused(missing, tmp_path)
    assert f"cannot read template {recipe.parent / 'gone.j2'}" in err


def test_an_evaluation_model_on_the_ray_executor(tmp_path: Path) -> None:
    # the gateway's sockets live on this host: a Ray worker's agent could not reach them
    recipe = _recipe(tmp_path, {"m": GOOD_MODEL}, {"model": "m"})
    data = yaml.safe_load(recipe.read_text())
    data["evaluator"]["config"]["model"] = "m"
    data["evaluator"]["executor"] = {"kind": "ray"}
    recipe.write_text(yaml.safe_dump(data))
    line = _refused(recipe, tmp_path)
    assert "evaluator.config.model" in line and "ray executor cannot" in line
