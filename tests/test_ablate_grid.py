"""``ablate --grid FILE`` (issue 27): named cells, each with its own ``--set`` items (and
method), so operators that need different configs run side by side and compare (the run
of a grid: ``-m e2e``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO, Mini, cli, make_mini

from rsiframe.study.gridspec import cell_of, read_grid

LEVEL = "[{file: config.yaml, key: level, range: [0, 9], step: 1}]"
STYLE = "[{file: config.yaml, key: style, choices: [plain, fancy]}]"
GRID = f"""\
repeats: 2
set: [budget.max_generations=1]
cells:
  - name: level-steps
    set: ["slots.mutate.config.knobs={LEVEL}", slots.mutate.config.max_steps=2]
  - name: style-round-robin
    set: ["slots.mutate.config.knobs={STYLE}", slots.mutate.config.order=round_robin]
"""


@pytest.mark.e2e
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


def test_a_grid_file_cell_may_run_a_method_on_the_target(tmp_path: Path) -> None:
    from rsiframe.study.ablate import plan_grid_file

    mini = make_mini(tmp_path / "p")
    (mini.seed / "knobs.yaml").write_text(
        "knobs:\n  - {file: config.yaml, key: level, range: [0, 9], step: 1}\n"
    )
    grid_file = mini.root / "grid.yaml"
    grid_file.write_text(
        "recipe: recipe.yaml\ncells:\n  - {name: own}\n  - {name: gepa, method: gepa}\n"
        f"  - {{name: dgm, method: {REPO}/recipes/methods/dgm.yaml}}\n"
    )
    grid = plan_grid_file(grid_file, None, [], 1, tmp_path / "grid")
    cells = {c.name: c for c in grid.cells()}
    assert cells["own"].method is None
    assert cells["gepa"].method == str(REPO / "recipes" / "methods" / "gepa.yaml")
    saved = read_grid(grid.root)
    assert saved is not None and saved.cells[1].method == cells["gepa"].method


def _refused(mini: Mini, grid: str, *args: object) -> str:
    grid_file = mini.root / "grid.yaml"
    grid_file.write_text(grid)
    out = mini.root / "out"
    res = cli("ablate", *args, "--grid", grid_file, "--out", out)
    assert res.exit_code == 2, res.stderr
    assert res.stderr.count("\n") == 1, res.stderr
    assert not out.exists()  # nothing made before every cell is valid
    return res.stderr


@pytest.mark.parametrize(
    ("grid", "says"),
    [
        (
            "cells:\n  - {name: a, set: [slots.mutate.config.max_changes=1]}\n  - {name: b}\n",
            "cells a and b resolve to the same method",
        ),
        ("cells:\n  - {name: a}\n  - {name: a, set: [random_seed=3]}\n", "named twice"),
        ("cells:\n  - {name: a, sett: []}\n", "cells.0.sett: unknown key"),
        ("cells:\n  - {name: a, set: [slots.mutate.config.max_changez=1]}\n", "cell a:"),
        ("cells: []\n", "cells"),
        ("cells:\n  - {name: a/b}\n", "cells.0.name"),
        ("cells:\n  - {name: a, method: gepaa}\n", "did you mean gepa"),
    ],
)
def test_a_bad_grid_file_is_one_line_before_anything_runs(
    tmp_path: Path, grid: str, says: str
) -> None:
    mini = make_mini(tmp_path / "p")
    assert says in _refused(mini, grid, mini.recipe)


def test_the_recipe_is_named_once(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    grid = "cells:\n  - {name: a}\n"
    assert "name the recipe once" in _refused(mini, grid)
    assert "name the recipe once" in _refused(mini, "recipe: recipe.yaml\n" + grid, mini.recipe)
    res = cli("ablate", mini.recipe, "--grid", mini.root / "grid.yaml", "--slot", "select")
    assert res.exit_code == 2 and "--grid FILE takes no --slot" in res.stderr


def test_the_readme_grid_file_plans_on_a_target(tmp_path: Path) -> None:
    from rsiframe.study.ablate import plan_grid_file

    readme = (REPO / "README.md").read_text()
    block = readme.split("**`rsiframe ablate [RECIPE] --grid FILE`**", 1)[1]
    text = block.split("```yaml", 1)[1].split("```", 1)[0]
    mini = make_mini(tmp_path / "p")
    (mini.seed / "knobs.yaml").write_text(
        "knobs:\n  - {file: config.yaml, key: level, range: [0, 9], step: 1}\n"
    )
    mini.recipe.rename(mini.root / "my-target.yaml")
    grid_file = mini.root / "grid.yaml"
    grid_file.write_text(text)
    grid = plan_grid_file(grid_file, None, [], None, tmp_path / "grid")
    assert grid.spec.repeats == 5 and grid.spec.cell_names() == ["two-knobs", "round-robin", "gepa"]
    assert len(grid.cells()) == 15
    assert "budget.max_task_runs=400" in grid.cells()[0].sets
