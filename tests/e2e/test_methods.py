"""The offline method recipes end to end on sat3, and hyperagents' candidate-carried
mutator (e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("method", ["hill_climb", "dgm-policy", "gepa-policy", "islands-policy"])
def test_offline_method_recipes_run_end_to_end_on_sat3(tmp_path: Path, method: str) -> None:
    from tests.support.cli import cli, status_json
    from tests.support.paths import REPO

    out = tmp_path / method
    res = cli(
        "run",
        REPO / "recipes" / "sat3" / f"{method}.yaml",
        "--out",
        out,
        "--quiet",
        "--set",
        "budget.max_generations=2",
        "--set",
        "children_per_generation=2",
    )
    assert res.exit_code == 0, res.stderr
    status = status_json(out)
    assert status["state"] == "finished"
    assert sum(1 for c in status["candidates"] if c["parent"]) == 4
    assert cli("verify", out).exit_code == 0


def test_hyperagents_recipe_evolves_its_own_candidate_carried_mutator(tmp_path: Path) -> None:
    from tests.support.cli import cli, status_json
    from tests.support.paths import REPO

    out = tmp_path / "hyperagents"
    res = cli(
        "run",
        REPO / "recipes" / "sat3" / "hyperagents-policy.yaml",
        "--out",
        out,
        "--quiet",
        "--set",
        "budget.max_generations=2",
        "--set",
        "children_per_generation=3",
    )
    assert res.exit_code == 0, res.stderr
    status = status_json(out)
    assert status["state"] == "finished"
    children = [c for c in status["candidates"] if c["parent"]]
    assert len(children) == 6
    # the mutator ran from the candidate's tree, and changed its own parameters in some child
    changed = [c for c in children if "mutator:" in c["description"]]
    assert changed, [c["description"] for c in children]
    assert cli("verify", out).exit_code == 0
