"""The embedded default and the shipped recipes: they resolve, and ablations are a line or
two apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.paths import REPO

RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


TEXTOPS = ("quickstart", "data-only", "trainer-only", "harness-only", "dth")


def resolved(name: str) -> dict:
    res = cli("recipe", "show", REPO / "recipes" / f"{name}.yaml", "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)["recipe"]


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_shipped_recipes_check(recipe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    for model in (yaml.safe_load(recipe.read_text()).get("models") or {}).values():
        for var in ("base_url_env", "api_key_env"):  # recipes with models name them up front
            if model.get(var):
                monkeypatch.setenv(model[var], "http://127.0.0.1:9/v1")
    res = cli("recipe", "check", recipe, "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["ok"]


def test_sat3_ablations_differ_from_the_sat3_quickstart_by_one_slot() -> None:
    base = resolved("sat3-quickstart")
    for recipe in RECIPES:
        if not recipe.stem.startswith("sat3-quickstart-"):
            continue
        data = resolved(recipe.stem)
        differing = [s for s in base["slots"] if base["slots"][s] != data["slots"][s]]
        assert len(differing) == 1, (recipe.name, differing)
        assert {k for k in base if base[k] != data[k]} == {"name", "slots"}


def test_the_dth_recipes_are_a_line_or_two_apart() -> None:
    base = resolved("textops-base")
    assert base["evaluator"]["config"]["build"]["contamination"]["policy"] == "reject"
    assert base["surface"]["include"] == ["data/**", "trainer/**", "harness/**"]
    for name in TEXTOPS:
        if name == "quickstart":
            continue
        data = resolved(name)
        changed = {k for k in base if base[k] != data[k]}
        assert changed <= {"name", "surface", "budget"}, (name, changed)
        assert data["evaluator"] == base["evaluator"] and data["slots"] == base["slots"]
    for part in ("data", "trainer", "harness"):
        assert resolved(f"{part}-only")["surface"]["include"] == [f"{part}/**"]
    # the quickstart is the base with a focused knob space: D, T and H together
    quick = resolved("quickstart")
    assert {k for k in base if base[k] != quick[k]} == {"name", "slots"}
    mutate, base_mutate = quick["slots"]["mutate"], base["slots"]["mutate"]
    assert mutate["config"]["space"] == "knobs-quickstart.yaml"
    assert {**mutate["config"], "space": base_mutate["config"]["space"]} == base_mutate["config"]
    assert {s: v for s, v in quick["slots"].items() if s != "mutate"} == {
        s: v for s, v in base["slots"].items() if s != "mutate"
    }


def test_the_readme_first_command_runs_the_dth_quickstart() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "QUICKSTART ?= recipes/quickstart.yaml" in makefile
    assert "rsiframe run $(QUICKSTART)" in makefile
    assert "scripts/setup-venv.sh" in makefile[makefile.index("$(VENV)/.installed:") :]
    setup = (REPO / "scripts" / "setup-venv.sh").read_text()
    assert setup.index("'torch==2.13.0'") < setup.index("-e '.[dev,train")
    assert resolved("quickstart")["seed"].endswith("tasks/textops/seed")
