"""The method policy operators drive real runs of the mini task set."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rsiframe.api import GateContext
from rsiframe.recipe.load import load as load_recipe
from tests.support.gepaview import View, cand
from tests.support.paths import REPO

# -- in real runs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        ["slots.select.operator=score_child_prop", "slots.gate.operator=keep_all"],
        ["slots.select.operator=pareto"],
        ["slots.gate.operator=paired_test"],
    ],
)
def test_method_operators_drive_a_real_run(tmp_path: Path, sets: list[str]) -> None:
    from tests.support.cli import cli, status_json
    from tests.support.mini import make_mini

    mini = make_mini(tmp_path / "proj", generations=2, children=2)
    res = cli(
        "run",
        mini.recipe,
        "--out",
        mini.run_dir(),
        "--quiet",
        *[a for s in sets for a in ("--set", s)],
    )
    assert res.exit_code == 0, res.stderr
    status = status_json(mini.run_dir())
    assert status["state"] == "finished"
    children = [c for c in status["candidates"] if c["parent"]]
    assert len(children) == 4
    if "slots.gate.operator=keep_all" in sets:
        assert all(c["state"] == "admitted" for c in children if c["scores"]["gate"] is not None)


# -- the faithful methods' recipes (issue 31) ---------------------------------------------


def test_the_gepa_recipe_admits_a_child_below_its_parent_on_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the audit's T-G1: every minibatch-accepted child joins the pool (no improves_parent)
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_API_KEY", "k")
    r = load_recipe(REPO / "recipes" / "pyfix" / "gepa.yaml")
    cls, config = r.operators["gate"]
    run = View([cand("c0"), cand("c1", "c0", state="certified")], gate={"c0": 0.9, "c1": 0.1})
    ctx = GateContext(run, random.Random(0), 1, cand("c1", "c0"), cand("c0"))  # type: ignore[arg-type]
    assert cls(config).gate(ctx).admit
    # one proposal at a time, accepted on the reflection's own minibatch, no lessons
    assert r.recipe.children_per_generation == 1
    assert r.data["slots"]["validate"]["config"]["tasks"] == "rollout"
    assert r.data["slots"]["rollout"]["config"] == {"max_tasks": 3, "reuse_certified": False}
    assert "reflect" not in r.data["slots"] and "merge" not in r.data["slots"]
    assert "analyze" not in r.data["slots"]


def test_the_dgm_recipe_is_the_parents_own_agent_with_an_archiving_stage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_API_KEY", "k")
    r = load_recipe(REPO / "recipes" / "pyfix" / "dgm.yaml")
    slots = r.data["slots"]
    assert slots["analyze"]["operator"] == "dgm_entry"
    mutate = slots["mutate"]
    assert (mutate["operator"], mutate["config"]["profile"]) == ("agent_cli", "command")
    assert mutate["config"]["command"].startswith("python3 agent.py --self-improve")
    assert slots["select"]["config"]["children"] == "archived"
    assert r.data["evaluator"]["stages"][0]["on_fail"] == "archive"
    assert "reflect" not in slots and "self_improve.md" in r.data["surface"]["include"]


def test_the_openevolve_recipe_samples_branches_ensembles_models_and_cascades(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_API_KEY", "k")
    r = load_recipe(REPO / "recipes" / "pyfix" / "openevolve.yaml")
    slots = r.data["slots"]
    select = slots["select"]["config"]
    assert slots["select"]["operator"] == "openevolve"
    assert (select["exploration"], select["exploitation"]) == (0.2, 0.7)
    assert (select["num_top_programs"], select["num_diverse"], select["split"]) == (3, 2, "train")
    assert [f["kind"] for f in select["features"]] == ["score", "size"]  # pyfix adds a size
    mutate = slots["mutate"]["config"]
    assert slots["mutate"]["operator"] == "openevolve_edit" and mutate["diff_based"] is True
    weights = {m["model"]: m["weight"] for m in mutate["models"]}
    assert weights == {"proposer": 0.8, "proposer_strong": 0.2}
    assert set(weights) <= set(r.data["models"])
    assert [s["split"] for s in r.data["evaluator"]["stages"]] == ["train", "train"]
    assert r.data["evaluator"]["stages"][0]["on_fail"] == "archive"
    assert slots["gate"]["operator"] == "keep_all"
    assert "reflect" not in slots and "analyze" not in slots  # OpenEvolve has neither
