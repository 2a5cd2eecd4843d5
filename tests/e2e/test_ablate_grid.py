"""``ablate --grid FILE`` run end to end: cells of different configs, then compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsiframe.study.gridspec import cell_of, read_grid
from tests.support.cli import cli
from tests.support.grid import GRID
from tests.support.mini import make_mini

pytestmark = pytest.mark.e2e


def test_a_grid_file_runs_cells_of_different_configs_and_compares(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p", generations=3, children=2)
    grid_file = mini.root / "grid.yaml"
    grid_file.write_text(GRID)
    out = tmp_path / "grid"
    res = cli("ablate", mini.recipe, "--grid", grid_file, "--out", out, "--json")
    assert res.exit_code == 0, res.stderr
    # round-robin over one two-valued knob draws nothing: warned once for the cell, not per run
    warned = [line for line in res.stderr.splitlines() if "warning:" in line]
    assert len(warned) == 1 and "style-round-robin: random_seed reaches no choice" in warned[0]
    cells = ["level-steps-r0", "level-steps-r1", "style-round-robin-r0", "style-round-robin-r1"]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == cells
    locks = {c: json.loads((out / c / "recipe.lock.json").read_text())["resolved"] for c in cells}
    for cell, r in locks.items():
        name, repeat = cell.rsplit("-r", 1)
        mutate = r["slots"]["mutate"]["config"]
        assert r["random_seed"] == int(repeat) and r["name"] == f"mini.{name}"
        assert r["budget"] == locks["level-steps-r0"]["budget"]  # every cell the same budget
        assert r["budget"]["max_generations"] == 1  # the grid's own --set, every cell
        if name == "level-steps":
            assert (mutate["knobs"][0]["key"], mutate["max_steps"], mutate["order"]) == (
                "level",
                2,
                "random",
            )
        else:
            assert (mutate["knobs"][0]["key"], mutate["order"]) == ("style", "round_robin")
    report = json.loads(res.stdout[res.stdout.index("{") :])
    assert report["refused"] == [] and report["unfinished"] == []
    methods = {m["name"]: m for m in report["methods"]}
    assert set(methods) == {"mini.level-steps", "mini.style-round-robin"}
    assert all(len(m["runs"]) == 2 for m in methods.values())
    (pair,) = report["pairs"]
    assert {pair["a"], pair["b"]} == set(methods)
    # the viewer groups the grid's runs by cell
    spec = read_grid(out)
    assert spec is not None and spec.cell_names() == ["level-steps", "style-round-robin"]
    assert cell_of(out / "style-round-robin-r1") == (spec, "style-round-robin", 1)
    # --resume: every run has ended, nothing runs again, the table comes back
    before = (out / "level-steps-r0" / "events.jsonl").read_bytes()
    res = cli("ablate", "--resume", out, "--quiet")
    assert res.exit_code == 0, res.stderr
    assert "compare: 2 methods, 4 runs, every run verified" in res.stdout
    assert (out / "level-steps-r0" / "events.jsonl").read_bytes() == before
