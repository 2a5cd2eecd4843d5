"""Candidates in flight on sat3 and on D/T/H builds give the same candidates as one at a
time (e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli, events
from tests.support.mini import outcome
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e


def test_sat3_generational_k1_and_k4_give_the_same_candidates(tmp_path: Path) -> None:
    recipe = REPO / "recipes" / "sat3-quickstart.yaml"
    got = []
    for k in (1, 4):
        out = tmp_path / f"k{k}"
        sets = ["--set", "budget.max_generations=2", "--set", f"concurrency.candidates={k}"]
        res = cli("run", recipe, "--out", out, "--quiet", *sets)
        assert res.exit_code == 0, res.stderr
        got.append(outcome(out))
    assert got[0] == got[1]
    assert len(got[0]["rows"]) == 9


def test_dth_builds_in_flight_give_the_same_candidates_as_one_at_a_time(tmp_path: Path) -> None:
    """The quickstart's shape (D/T/H builds, generational, K=2): two children are built,
    trained and evaluated at once, and the candidates, models and champion are those of
    K=1. Each run has a cache of its own, so both really train."""
    from tests.support.cli import cli_proc
    from tests.support.dth import recipe, write_seed, write_tasks

    write_seed(tmp_path / "seed")
    write_tasks(tmp_path / "tasks")
    (tmp_path / "recipe.yaml").write_text(recipe(children=2))
    got, weights = [], []
    for k in (1, 2):
        out = tmp_path / f"k{k}"
        sets = ["--set", f"concurrency.candidates={k}"]
        env = {"RSIFRAME_CACHE_DIR": str(tmp_path / f"cache{k}")}
        res = cli_proc(
            "run", tmp_path / "recipe.yaml", "--out", out, "--quiet", *sets, env=env, timeout=900
        )
        assert res.returncode == 0, res.stderr
        got.append(outcome(out))
        evs = events(out)
        built = {e["data"]["id"]: e["data"]["model"] for e in evs if e["type"] == "model_built"}
        weights.append({cid: m["weights_digest"] for cid, m in built.items()})
        if k == 2:  # both children's train evaluations (builds first) were in flight together
            kinds = [(e["type"], e["data"].get("id"), e["data"].get("split")) for e in evs]
            starts = [
                i
                for i, t in enumerate(kinds)
                if t[0] == "evaluation_started" and t[1] != "c0000" and t[2] == "train"
            ]
            first_child_build = min(
                i for i, t in enumerate(kinds) if t[0] == "model_built" and t[1] != "c0000"
            )
            assert len(starts) == 2 and max(starts) < first_child_build, kinds
    assert got[0] == got[1]
    assert weights[0] == weights[1]  # the same models, trained twice
    assert len(got[0]["rows"]) == 3 and got[0]["champion"] is not None
