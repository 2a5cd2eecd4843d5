"""`recipe show|check` and `operators list|describe`: overrides resolved, ablations by
`extends:`, operators described with their slot and config."""

from __future__ import annotations

import json

from tests.support.cli import assert_user_error, cli, edit
from tests.support.mini import Mini


def test_recipe_show_resolves_overrides(mini: Mini) -> None:
    res = cli(
        "recipe",
        "show",
        mini.recipe,
        "--json",
        "--set",
        "slots.select.operator=tournament",
        "--set",
        "slots.select.config.size=4",
    )
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["recipe"]["slots"]["select"] == {"operator": "tournament", "config": {"size": 4}}
    assert len(data["digest"]) == 64
    plain = json.loads(cli("recipe", "show", mini.recipe, "--json").stdout)
    assert plain["digest"] != data["digest"]


def test_changing_an_operator_drops_the_inherited_config(mini: Mini) -> None:
    edit(mini, "select: {operator: best}", "select: {operator: best, config: {top_k: 2}}")
    res = cli("recipe", "show", mini.recipe, "--json", "--set", "slots.select.operator=uniform")
    assert json.loads(res.stdout)["recipe"]["slots"]["select"] == {
        "operator": "uniform",
        "config": {},
    }


def test_extends_makes_an_ablation_one_line(mini: Mini) -> None:
    child = mini.root / "ablation.yaml"
    child.write_text(
        "extends: recipe.yaml\nname: mini-uniform\nslots:\n  select: {operator: uniform}\n"
    )
    res = cli("recipe", "show", child, "--json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)["recipe"]
    assert data["name"] == "mini-uniform"
    assert data["slots"]["select"]["operator"] == "uniform"
    assert data["seed"] == str(mini.seed.resolve())  # relative to the file that said it
    assert cli("recipe", "check", child).exit_code == 0


def test_recipe_check_ok(mini: Mini) -> None:
    res = cli("recipe", "check", mini.recipe)
    assert res.exit_code == 0
    assert "ok" in res.stdout and "4 train" in res.stdout


def test_operators_list_and_describe() -> None:
    res = cli("operators", "list", "--json")
    rows = json.loads(res.stdout)
    names = {(r["slot"], r["name"]) for r in rows}
    assert {
        ("select", "best"),
        ("select", "tournament"),
        ("select", "epsilon_greedy"),
        ("select", "uniform"),
        ("rollout", "local"),
        ("analyze", "failures"),
        ("mutate", "knobs"),
        ("mutate", "script"),
        ("validate", "command"),
        ("novelty", "tree_dedup"),
        ("gate", "improves_parent"),
        ("gate", "threshold"),
        ("gate", "always"),
        ("record", "notes"),
        ("reflect", "lessons"),
    } <= names
    res = cli("operators", "describe", "tournament", "--json")
    d = json.loads(res.stdout)
    assert d["slot"] == "select"
    assert d["fields"] == [
        {
            "name": "size",
            "type": "integer",
            "required": False,
            "default": 3,
            "description": "contestants drawn per tournament",
        }
    ]
    text = cli("operators", "describe", "mutate.knobs").stdout
    assert "max_changes" in text and "knobs" in text
    assert_user_error(cli("operators", "describe", "tournamnet"), 2, "did you mean")
