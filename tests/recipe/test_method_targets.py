"""Methods apart from targets (issue 27): a method file holds only what the method decides,
a run combines a target recipe with a method (``extends: [target, method]`` or ``--method``),
nothing of sat3 rides along, and ``compare`` takes a method's runs beside the target's own.

README's "Run a published method on your task set" is run here on the mini task set
(``-m e2e``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.cli import cli
from tests.support.methodtargets import show, target
from tests.support.paths import REPO

METHODS = sorted((REPO / "recipes" / "methods").glob("*.yaml"))
SAT3 = sorted((REPO / "recipes" / "sat3").glob("*.yaml"))
#: what a method file may hold (recipe.schema.Method)
METHOD_KEYS = {
    "kind",
    "name",
    "description",
    "slots",
    "children_per_generation",
    "concurrency",
    "budget",
    "evaluator",
    "models",
    "information",
}


@pytest.fixture(autouse=True)
def _model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model methods name their variables up front (recipe check needs them set)."""
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_API_KEY", "unused")


# -- the method files -------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS, ids=[m.stem for m in METHODS])
def test_method_files_hold_only_what_a_method_decides(method: Path) -> None:
    res = cli("recipe", "check", method, "--json")
    assert res.exit_code == 0, res.stderr
    checked = json.loads(res.stdout)
    assert checked["kind"] == "method" and checked["name"]
    raw = yaml.safe_load(method.read_text())
    assert raw["kind"] == "method"
    assert set(raw) - {"extends"} <= METHOD_KEYS, set(raw) - METHOD_KEYS
    assert set(raw.get("evaluator") or {}) <= {"stages"}
    # nothing of sat3 in what the method says (its comments may point at recipes/sat3/)
    said = json.dumps({k: v for k, v in raw.items() if k != "description"})
    for sat3 in ("sat3", "solver.yaml", "DPLL", "agent_timeout_s"):
        assert sat3 not in said, (method.name, sat3)


@pytest.mark.parametrize("recipe", SAT3, ids=[r.stem for r in SAT3])
def test_each_sat3_recipe_is_the_sat3_target_then_its_method(recipe: Path) -> None:
    res = cli("recipe", "check", recipe, "--json")
    assert res.exit_code == 0, res.stderr
    combined = show(recipe)["recipe"]
    sat3 = show(REPO / "recipes" / "sat3-quickstart.yaml")["recipe"]
    method = show(REPO / "recipes" / "sat3-quickstart.yaml", "--method", recipe.stem)["recipe"]
    # the target's evaluator and task set, whatever the method
    for key in ("seed", "tasks"):
        assert combined[key] == sat3[key] == method[key]
    assert combined["evaluator"]["config"] == sat3["evaluator"]["config"]
    assert combined["name"] == method["name"] == recipe.stem
    # what the combination adds on top of `--method` is sat3's own setting of the method
    extra = {k for k in combined if combined[k] != method[k]}
    assert extra <= {"slots", "surface"}, extra


def test_method_option_and_extends_list_are_one_method(tmp_path: Path) -> None:
    mini = target(tmp_path / "p")
    text = mini.recipe.read_text().replace(
        "  reflect: {operator: lessons}\n",
        "  reflect: {operator: lessons}\n"
        '  validate: {operator: command, config: {command: "true"}}\n',
    )
    mini.recipe.write_text(text)
    line = mini.root / "gepa-here.yaml"
    line.write_text(f"extends: [recipe.yaml, {REPO}/recipes/methods/gepa-policy.yaml]\n")
    by_option = show(mini.recipe, "--method", "gepa-policy")
    by_extends = show(line)
    assert by_option["digest"] == by_extends["digest"]
    r = by_option["recipe"]
    base = show(mini.recipe)["recipe"]
    gepa = yaml.safe_load((REPO / "recipes" / "methods" / "gepa-policy.yaml").read_text())
    # the method's slots replace the target's whole (the target's validate is gone) ...
    assert set(r["slots"]) == set(gepa["slots"])
    assert r["slots"]["validate"]["operator"] == "minibatch"
    assert r["slots"]["select"]["operator"] == "pareto"
    # ... and the rest is the target's: evaluator, tasks, surface, budget, seed
    for key in ("evaluator", "tasks", "surface", "budget", "seed", "random_seed"):
        assert r[key] == base[key], key
    assert (r["name"], r["children_per_generation"]) == ("gepa-policy", 2)


def test_a_method_file_run_alone_names_how_to_run_it() -> None:
    res = cli("run", REPO / "recipes" / "methods" / "gepa.yaml")
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1, res.stderr
    assert "a method, not a recipe" in res.stderr and "--method gepa" in res.stderr


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ("evaluator:\n  config: {agent_timeout_s: 60}\n", "evaluator.config"),
        ("seed: ../seed\n", "seed"),
        ("surface: {include: [solver.yaml]}\n", "surface"),
        ("tasks: {path: ../tasks}\n", "tasks"),
    ],
)
def test_a_method_file_holding_a_target_key_is_refused(
    tmp_path: Path, extra: str, key: str
) -> None:
    method = tmp_path / "m.yaml"
    method.write_text(
        "kind: method\nname: m\nslots:\n  select: {operator: best}\n  rollout: {operator: local}\n"
        "  mutate: {operator: knobs, config: {space: knobs.yaml}}\n"
        "  gate: {operator: improves_parent}\n  record: {operator: notes}\n" + extra
    )
    for args in (("recipe", "check", method), ("recipe", "check", REPO / "recipes" /
                 "sat3-quickstart.yaml", "--method", method)):  # fmt: skip
        res = cli(*args)
        assert res.exit_code == 2, res.stderr
        assert res.stderr.count("\n") == 1, res.stderr
        assert f"{key}: belongs to the target recipe, not a method" in res.stderr


def test_extends_order_and_unknown_methods_are_one_line(tmp_path: Path) -> None:
    mini = target(tmp_path / "p")
    wrong = mini.root / "wrong.yaml"
    wrong.write_text(f"extends: [{REPO}/recipes/methods/gepa.yaml, recipe.yaml]\n")
    res = cli("recipe", "check", wrong)
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert "recipe.yaml comes after the method gepa.yaml" in res.stderr
    res = cli("recipe", "check", mini.recipe, "--method", "gepaa")
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert "unknown method 'gepaa' (did you mean gepa, gepa-policy?)" in res.stderr
    res = cli("recipe", "check", mini.recipe, "--method", mini.recipe)
    assert res.exit_code == 2 and "is a recipe, not a method" in res.stderr
