"""An ablate grid's folder, read-only: ``ablate.json`` and which cell a run folder is.

A leaf shared by ``ablate`` (which writes the grid) and the viewer (which groups a grid's
runs)::

    <grid>/ablate.json        recipe, the cells (one operator of a slot each, or named cells
                              of a grid file with their own --set items and method), the
                              --set items of every cell, repeats
    <grid>/<cell>-r<r>/       one run folder per cell and repeat
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

GRID_FILE = "ablate.json"
#: a grid file's cell name: a run name's piece and a folder name
CELL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class GridCell(BaseModel):
    """A named cell of a grid file: its own ``--set`` items and, maybe, its own method."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=CELL_NAME)
    sets: list[str] = Field(default_factory=list)
    method: str | None = None  # a method file (absolute path): the cell's target runs it


class GridSpec(BaseModel):
    """What ``ablate.json`` holds: enough to rebuild every cell's run. Either ``slot`` and
    its ``operators`` (``--operators``: one cell per operator) or ``cells`` (a grid file)."""

    model_config = ConfigDict(extra="forbid")

    recipe: str
    slot: str | None = None
    operators: list[str] = Field(default_factory=list)
    cells: list[GridCell] = Field(default_factory=list)
    method: str | None = None  # every cell's method, unless a cell names its own
    sets: list[str] = Field(default_factory=list)
    repeats: int = Field(ge=1)
    name: str

    @model_validator(mode="after")
    def _one_kind(self) -> GridSpec:
        by_operator = self.slot is not None and self.operators and not self.cells
        by_cell = self.slot is None and not self.operators and self.cells
        if not (by_operator or by_cell):
            raise ValueError("a grid has a slot and its operators, or cells, not both")
        return self

    def cell_names(self) -> list[str]:
        """Every cell's name, in order: its operator, or its name in the grid file."""
        return list(self.operators) if self.slot is not None else [c.name for c in self.cells]

    def label(self, cell: str) -> str:
        """How a cell is shown: ``select=best``, or the grid file's name for it."""
        return f"{self.slot}={cell}" if self.slot is not None else cell


def cell_dir(cell: str, repeat: int) -> str:
    return f"{cell}-r{repeat}"


def read_grid(root: Path) -> GridSpec | None:
    """The grid spec in ``root``, or None when ``root`` is not a (readable) grid."""
    try:
        return GridSpec.model_validate_json((Path(root) / GRID_FILE).read_text())
    except (OSError, ValidationError):
        return None


def cell_of(run_root: Path) -> tuple[GridSpec, str, int] | None:
    """(grid, cell name, repeat) when ``run_root`` is a cell of a grid, else None."""
    run_root = Path(run_root)
    spec = read_grid(run_root.parent)
    if spec is None:
        return None
    for cell in spec.cell_names():
        for r in range(spec.repeats):
            if cell_dir(cell, r) == run_root.name:
                return spec, cell, r
    return None
