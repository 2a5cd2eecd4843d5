"""`ablate` on real runs of the mini task set: every operator with the same seeds and
budget, `--resume`, refusals before any run."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import cli
from tests.support.grid import Grid
from tests.support.mini import make_mini

# -- ablate ---------------------------------------------------------------------------


def test_ablate_runs_every_operator_with_the_same_seeds_and_budget(grid: Grid) -> None:
    runs = sorted(p.name for p in grid.root.iterdir() if p.is_dir())
    assert runs == ["best-r0", "best-r1", "uniform-r0", "uniform-r1"]
    locks = {r: json.loads((grid.root / r / "recipe.lock.json").read_text()) for r in runs}
    for r, lock in locks.items():
        op, repeat = r.split("-r")
        resolved = lock["resolved"]
        assert resolved["slots"]["select"]["operator"] == op
        assert resolved["random_seed"] == int(repeat)
        assert resolved["budget"] == locks["best-r0"]["resolved"]["budget"]
    status = json.loads(cli("status", grid.root / "uniform-r1", "--json").stdout)
    assert status["state"] == "finished"


def test_ablate_resume_finishes_the_grid_and_leaves_ended_runs_alone(grid: Grid) -> None:
    assert (grid.root / "best-r0" / "events.jsonl").read_bytes() == grid.first_events
    # the run that was created but never driven was resumed, not replaced
    events = (grid.root / "uniform-r0" / "events.jsonl").read_text().splitlines()
    sessions = [json.loads(e) for e in events if '"session_started"' in e]
    assert [s["data"]["resumed"] for s in sessions] == [False, True]
    # and the grid ends with the compare table
    assert "compare: 2 methods, 4 runs, every run verified" in grid.resume_stdout


def test_ablate_refuses_an_operator_of_another_slot_before_any_run(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    out = tmp_path / "grid"
    res = cli("ablate", mini.recipe, "--slot", "select", "--operators", "best,always", "--out", out)
    assert res.exit_code == 2
    assert res.stderr.strip().count("\n") == 0
    assert "unknown select operator 'always'" in res.stderr
    assert not out.exists()
