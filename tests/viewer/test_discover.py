"""rsiframe.viewer.discover: which run folders a PATH names (the folder, the runs in it, the
cells of ablate grids in it), or one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.errors import RunFolderError
from rsiframe.study.gridspec import GRID_FILE, GridSpec
from rsiframe.viewer.discover import find_runs, is_run


def _run(path: Path) -> Path:
    path.mkdir(parents=True)
    for name in ("events.jsonl", "recipe.lock.json", "pubkey.pem"):
        (path / name).write_text("")
    return path


def test_a_run_folder_or_the_runs_and_grid_cells_inside_a_folder(tmp_path: Path) -> None:
    b, a = _run(tmp_path / "b"), _run(tmp_path / "a")
    (tmp_path / "not-a-run").mkdir()
    grid = tmp_path / "grid"
    grid.mkdir()
    spec = GridSpec(recipe="r.yaml", slot="select", operators=["best"], repeats=1, name="g")
    (grid / GRID_FILE).write_text(spec.model_dump_json())
    cell = _run(grid / "best-r0")
    assert find_runs(tmp_path) == [a.resolve(), b.resolve(), cell.resolve()]
    assert find_runs(a) == [a.resolve()]
    assert is_run(a) and not is_run(tmp_path / "not-a-run")


def test_a_path_with_no_run_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="no such folder"):
        find_runs(tmp_path / "nope")
    with pytest.raises(RunFolderError, match="holds no run folders"):
        find_runs(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "events.jsonl").write_text("")  # looks like a run, is not one
    with pytest.raises(RunFolderError, match=r"pubkey\.pem is missing"):
        find_runs(broken)
