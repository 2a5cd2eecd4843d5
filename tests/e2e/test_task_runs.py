"""The gepa-policy recipe stops at its task-run budget on sat3 (e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli, events, status_json

pytestmark = pytest.mark.e2e


def test_the_gepa_recipe_stops_at_its_task_run_budget_on_sat3(tmp_path: Path) -> None:
    from tests.support.paths import REPO

    out, limit = tmp_path / "gepa", 200
    res = cli(
        "run", REPO / "recipes" / "sat3" / "gepa-policy.yaml", "--out", out, "--quiet",
        "--set", f"budget.max_task_runs={limit}", "--set", "budget.max_evaluations=null",
        "--set", "budget.max_generations=100", "--set", "budget.max_candidates=null",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert cli("verify", out).exit_code == 0
    st, evs = status_json(out), events(out)
    used = st["budget"]["used"]["task_runs"]
    minibatches = [e["data"] for e in evs if e["type"] == "tasks_run"]
    assert minibatches and all(m == {**m, "purpose": "minibatch", "tasks": 8} for m in minibatches)
    finished = sum(1 for e in evs if e["type"] == "task_finished")
    assert used == finished + 8 * len(minibatches) <= limit
    # minibatch-rejected children paid for their 8 tasks, and nothing more
    rejected = [c for c in st["candidates"] if c["state"] == "rejected"]
    assert all(c["reasons"][0].startswith("validate: minibatch [") for c in rejected)
    assert st["state"] == "budget_exhausted" and st["reason"] == f"task runs would exceed {limit}"
    # sat3: train 24, gate 24, sealed 12; a GEPA child's worst case is 8 + 24 + 24
    assert used + 56 + 12 > limit
