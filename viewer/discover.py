"""Which run folders a PATH names: the folder itself, or the run folders directly inside it."""

from __future__ import annotations

from pathlib import Path

from rsiframe.archive.runfolder import RunPaths
from rsiframe.errors import RunFolderError
from rsiframe.study.gridspec import read_grid


def is_run(path: Path) -> bool:
    return (path / "events.jsonl").is_file() and (path / "recipe.lock.json").is_file()


def find_runs(path: Path) -> list[Path]:
    """One run folder, or the run folders below ``path``: one level down, and inside
    ablate grids one level down (sorted by name)."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise RunFolderError("no such folder", where=str(path))
    if (path / "events.jsonl").exists():
        RunPaths(path).check()
        return [path]
    runs = sorted(p for p in path.iterdir() if p.is_dir() and is_run(p))
    # an ablate grid's runs sit one level deeper (<path>/<grid>/<op>-r<r>/)
    for grid in sorted(p for p in path.iterdir() if read_grid(p) is not None):
        runs += sorted(p for p in grid.iterdir() if p.is_dir() and is_run(p))
    if not runs:
        raise RunFolderError("not a run folder, and holds no run folders", where=str(path))
    return runs
