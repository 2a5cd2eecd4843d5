"""The embedded default: its recipes resolve, and (with `-m e2e`) it runs end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, cli, cli_proc, events

RECIPES = sorted((REPO / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_shipped_recipes_check(recipe: Path) -> None:
    res = cli("recipe", "check", recipe, "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["ok"]


def test_ablations_differ_from_the_quickstart_by_one_slot() -> None:
    base = json.loads(cli("recipe", "show", REPO / "recipes" / "quickstart.yaml", "--json").stdout)[
        "recipe"
    ]
    for recipe in RECIPES:
        if recipe.stem == "quickstart":
            continue
        data = json.loads(cli("recipe", "show", recipe, "--json").stdout)["recipe"]
        differing = [s for s in base["slots"] if base["slots"][s] != data["slots"][s]]
        assert len(differing) == 1, (recipe.name, differing)
        assert {k for k in base if base[k] != data[k]} == {"name", "slots"}


@pytest.mark.e2e
def test_quickstart_improves_the_seed_honestly(tmp_path: Path) -> None:
    out = tmp_path / "quickstart"
    res = cli_proc(
        "run", REPO / "recipes" / "quickstart.yaml", "--out", out, "--quiet", timeout=900
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == str(out.resolve())
    status = json.loads(cli_proc("status", out, "--json").stdout)
    assert status["state"] == "finished"
    by_id = {c["id"]: c for c in status["candidates"]}
    seed, champ = by_id[status["seed"]], by_id[status["champion"]]
    assert seed["scores"]["gate"] <= 0.35
    assert champ["scores"]["gate"] >= seed["scores"]["gate"] + 0.25
    # the sealed anchor rises too: the climb is not just fitting the gate split
    assert champ["scores"]["sealed"] > seed["scores"]["sealed"]
    changed = {
        ch["path"]
        for e in events(out)
        if e["type"] == "candidate_mutated"
        for ch in e["data"]["changes"]
    }
    assert changed == {"solver.yaml"}
    verify = json.loads(cli_proc("verify", out, "--json").stdout)
    assert verify["ok"], verify["problems"]
