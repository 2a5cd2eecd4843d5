"""Ablation overrides: operator switches, whole mappings, removal, and run names that say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsiframe.recipe import load as recipe_mod
from rsiframe.recipe import overrides as ov
from rsiframe.viewer.source import RunSource
from rsiframe.viewer.widgets.runs_table import run_cells
from tests.support.cli import cli, status_json
from tests.support.mini import Mini
from tests.support.paths import REPO

TOURNAMENT = REPO / "recipes" / "sat3-quickstart-tournament.yaml"


def _show(*args: str | Path) -> dict:
    res = cli("recipe", "show", *args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)["recipe"]


@pytest.mark.parametrize(
    "sets",
    [
        ["slots.select.operator=best", "slots.select.config.top_k=2"],
        ["slots.select.config.top_k=2", "slots.select.operator=best"],
        ["slots.select={operator: best, config: {top_k: 2}}"],
        ["slots.select.config={top_k: 2}", "slots.select.operator=best"],
    ],
)
def test_switching_operator_replaces_its_config_in_any_order(sets: list[str]) -> None:
    args: list[str | Path] = [TOURNAMENT]
    for item in sets:
        args += ["--set", item]
    data = _show(*args)
    assert data["slots"]["select"] == {"operator": "best", "config": {"top_k": 2}}
    assert data["name"].startswith("sat3-quickstart-tournament[")
    assert "select=best" in data["name"]


def test_extends_recipe_switching_operator_drops_the_inherited_config(tmp_path: Path) -> None:
    ablation = tmp_path / "best.yaml"
    ablation.write_text(
        f"extends: {TOURNAMENT}\nname: sat3-best\n"
        "slots:\n  select: {operator: best, config: {top_k: 2}}\n"
    )
    data = _show(ablation)
    assert data["slots"]["select"] == {"operator": "best", "config": {"top_k": 2}}
    assert data["name"] == "sat3-best"  # no overrides on the command line: no label


def test_new_config_is_validated_against_the_new_operator() -> None:
    res = cli(
        "recipe",
        "show",
        TOURNAMENT,
        "--set",
        "slots.select.operator=best",
        "--set",
        "slots.select.config.size=3",
    )
    assert res.exit_code == 2
    assert "slots.select.config.size: unknown key" in res.stderr


def test_same_operator_keeps_its_config() -> None:
    data = _show(TOURNAMENT, "--set", "slots.select.operator=tournament")
    assert data["slots"]["select"]["config"]["size"] == 3


def test_split_from_ratios_to_lists_by_unset_by_null_and_by_mapping(mini: Mini) -> None:
    mini.recipe.write_text(
        mini.recipe.read_text().replace(
            "    train: [t1, t3, t5, t7]\n    gate: [t2, t4, t6, t8]\n    sealed: [t9, t10]\n",
            "    ratios: {train: 0.5, gate: 0.3, sealed: 0.2}\n",
        )
    )
    lists = ["tasks.split.train=[t1, t2]", "tasks.split.gate=[t3]", "tasks.split.sealed=[t4]"]
    want = {"train": ["t1", "t2"], "gate": ["t3"], "sealed": ["t4"]}
    ways = [
        [a for item in lists for a in ("--set", item)] + ["--unset", "tasks.split.ratios"],
        [a for item in ["tasks.split.ratios=null", *lists] for a in ("--set", item)],
        ["--set", "tasks.split={train: [t1, t2], gate: [t3], sealed: [t4]}"],
    ]
    for way in ways:
        split = _show(mini.recipe, *way)["tasks"]["split"]
        assert {k: split[k] for k in want} == want and split["ratios"] is None, way
        res = cli("recipe", "check", mini.recipe, *way, "--json")
        assert res.exit_code == 0, res.stderr
        assert json.loads(res.stdout)["split"] == want
    # without removing the ratios, the mix is refused with the reason
    res = cli("recipe", "check", mini.recipe, *[a for i in lists for a in ("--set", i)])
    assert res.exit_code == 2 and "either explicit train/gate/sealed lists or ratios" in res.stderr


def test_null_over_a_value_still_means_unlimited(mini: Mini) -> None:
    assert (
        _show(mini.recipe, "--set", "budget.max_generations=null")["budget"]["max_generations"]
        is None
    )


def test_a_set_mapping_replaces_instead_of_merging() -> None:
    base = {"a": {"b": 1, "c": 2}}
    assert ov.merge(base, ov.overrides(["a={c: 3}"], Path("/"))) == {"a": {"c": 3}}
    assert ov.merge(base, ov.overrides(["a={c: 3}", "a.d=4"], Path("/"))) == {"a": {"c": 3, "d": 4}}
    assert ov.merge(base, ov.overrides(["a.c=3"], Path("/"))) == {"a": {"b": 1, "c": 3}}
    assert ov.merge(base, ov.overrides([], Path("/"), ["a.b"])) == {"a": {"c": 2}}


def test_run_label() -> None:
    assert ov.run_label(["slots.select.operator=best"]) == "select=best"
    assert ov.run_label(["slots.select={operator: best, config: {top_k: 2}}"]) == (
        "select=best,select.top_k=2"
    )
    assert ov.run_label(["budget.max_candidates=2"], ["slots.analyze"]) == (
        "budget.max_candidates=2,-slots.analyze"
    )
    assert ov.run_label(["slots.select.operator=best", "name=mine"]) == ""
    assert ov.folder_safe("sat3[select=best]") == "sat3.select=best"
    # many --set: cut to a name a file system takes, a digest keeping it distinct
    long = "llm-hill-climb[" + ",".join(f"slots.s{i}.config.x={i}" for i in range(40)) + "]"
    cut = ov.folder_safe(long)
    assert len(cut) <= ov.FOLDER_NAME_MAX and cut.startswith("llm-hill-climb.slots.s0")
    assert cut != ov.folder_safe(long.replace("x=39", "x=40"))


def test_a_run_made_with_set_is_named_for_it(mini: Mini) -> None:
    out = mini.run_dir()
    res = cli(
        "run", mini.recipe, "--out", out, "--quiet", "--set", "budget.max_generations=0",
        "--set", "slots.select.operator=uniform",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    name = "mini[budget.max_generations=0,select=uniform]"
    assert status_json(out)["name"] == name
    assert name in cli("status", out).stdout
    # the runs screen's recipe column shows it too
    source = RunSource(out)
    source.read_all()
    assert name in {str(cell) for cell in run_cells(source)}

    named = mini.root / "named"
    res = cli(
        "run", mini.recipe, "--out", named, "--quiet", "--set", "budget.max_generations=0",
        "--set", "name=baseline-0",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert status_json(named)["name"] == "baseline-0"


def test_recipe_load_without_overrides_keeps_the_name(mini: Mini) -> None:
    assert recipe_mod.load(mini.recipe).recipe.name == "mini"
