"""``ablate --grid FILE`` (issue 27): named cells, each with its own ``--set`` items (and
method), so operators that need different configs run side by side and compare (the run
of a grid: ``-m e2e``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.study.gridspec import read_grid
from tests.support.cli import cli
from tests.support.mini import Mini, make_mini
from tests.support.paths import REPO


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
    assert grid.spec.repeats == 5 and grid.spec.cell_names() == [
        "two-knobs",
        "round-robin",
        "gepa-policy",
    ]
    assert len(grid.cells()) == 15
    assert "budget.max_task_runs=400" in grid.cells()[0].sets
