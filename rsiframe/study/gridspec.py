"""An ablate grid's folder, read-only: ``ablate.json`` and which cell a run folder is.

A leaf shared by ``ablate`` (which writes the grid) and the viewer (which groups a grid's
runs)::

    <grid>/ablate.json        recipe, slot, operators, --set items, repeats
    <grid>/<op>-r<r>/         one run folder per cell
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

GRID_FILE = "ablate.json"


class GridSpec(BaseModel):
    """What ``ablate.json`` holds: enough to rebuild every cell's run."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    slot: str
    operators: list[str] = Field(min_length=1)
    sets: list[str] = Field(default_factory=list)
    repeats: int = Field(ge=1)
    name: str


def cell_dir(operator: str, repeat: int) -> str:
    return f"{operator}-r{repeat}"


def read_grid(root: Path) -> GridSpec | None:
    """The grid spec in ``root``, or None when ``root`` is not a (readable) grid."""
    try:
        return GridSpec.model_validate_json((Path(root) / GRID_FILE).read_text())
    except (OSError, ValidationError):
        return None


def cell_of(run_root: Path) -> tuple[GridSpec, str, int] | None:
    """(grid, operator, repeat) when ``run_root`` is a cell of a grid, else None."""
    run_root = Path(run_root)
    spec = read_grid(run_root.parent)
    if spec is None:
        return None
    for op in spec.operators:
        for r in range(spec.repeats):
            if cell_dir(op, r) == run_root.name:
                return spec, op, r
    return None
