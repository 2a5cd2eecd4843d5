"""rsiframe.study.gridspec: a grid's ``ablate.json`` read back, and which cell a run is."""

from __future__ import annotations

from pathlib import Path

from rsiframe.study.gridspec import GRID_FILE, GridSpec, cell_dir, cell_of, read_grid


def test_a_run_folder_is_a_cell_only_of_the_grid_around_it(tmp_path: Path) -> None:
    spec = GridSpec(
        recipe="r.yaml", slot="select", operators=["best", "uniform"], repeats=2, name="g"
    )
    (tmp_path / GRID_FILE).write_text(spec.model_dump_json())
    assert read_grid(tmp_path) == spec
    assert cell_dir("uniform", 1) == "uniform-r1"
    assert cell_of(tmp_path / "uniform-r1") == (spec, "uniform", 1)
    assert cell_of(tmp_path / "uniform-r2") is None  # only 2 repeats
    assert cell_of(tmp_path / "tournament-r0") is None


def test_a_folder_without_a_valid_grid_is_none(tmp_path: Path) -> None:
    assert read_grid(tmp_path) is None and cell_of(tmp_path / "best-r0") is None
    (tmp_path / GRID_FILE).write_text('{"recipe": "r.yaml", "repeats": 0}')
    assert read_grid(tmp_path) is None
