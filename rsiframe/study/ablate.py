"""``rsiframe ablate``: cells times N seeds, from one recipe, as one resumable grid.

A grid's cells are the operators of one slot (``--slot S --operators A,B``) or the named
cells of a grid file (``--grid FILE``), each with its own ``--set`` items and, maybe, its
own method (:class:`GridFile`), so operators that need different configs, or different
methods, run side by side. Repeat ``r`` of every cell runs with ``random_seed`` r, so the
cells meet the same seeds; every other key (budget included) comes from the recipe and the
``--set`` items every cell shares, so budgets are identical. Two cells that would resolve
to one method are refused before anything runs (compare would pool them). The grid is a
folder (:mod:`rsiframe.study.gridspec`).

``--resume`` finishes what is left: cells never started are created, interrupted runs are
resumed, ended runs are left as they are.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rsiframe.api import SLOTS
from rsiframe.errors import RecipeError, RunFolderError
from rsiframe.recipe import load as recipe_mod
from rsiframe.slots.registry import resolve
from rsiframe.study.gridspec import CELL_NAME, GRID_FILE, GridCell, GridSpec, cell_dir
from rsiframe.util.validation import first_error


@dataclass(frozen=True)
class Cell:
    name: str  # the operator of an --operators grid, or the grid file's name for the cell
    repeat: int
    path: Path
    sets: list[str] = field(default_factory=list)
    method: str | None = None  # the method file its target runs (--method), if any

    @property
    def label(self) -> str:
        return f"{self.name}-r{self.repeat}"


@dataclass
class Grid:
    root: Path
    spec: GridSpec

    def cells(self) -> list[Cell]:
        s = self.spec
        return [
            Cell(
                name,
                r,
                self.root / cell_dir(name, r),
                [*s.sets, *sets, f"random_seed={r}", f"name={s.name}.{run}"],
                method,
            )
            for r in range(s.repeats)
            for name, sets, method, run in self._designs()
        ]

    def _designs(self) -> list[tuple[str, list[str], str | None, str]]:
        """Per cell: its name, its own --set items, its method and its run's name piece."""
        s = self.spec
        if s.slot is not None:
            return [
                (op, [f"slots.{s.slot}.operator={op}"], s.method, f"{s.slot}-{op}")
                for op in s.operators
            ]
        return [(c.name, list(c.sets), c.method or s.method, c.name) for c in s.cells]

    def save(self) -> None:
        data = self.spec.model_dump(exclude_defaults=True)  # an --operators grid as before
        data.setdefault("sets", [])
        (self.root / GRID_FILE).write_text(json.dumps(data, indent=2) + "\n")


class GridFileCell(BaseModel):
    """One cell of a grid file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(pattern=CELL_NAME, description="the cell's name (its runs' folders)")
    sets: list[str] = Field(default_factory=list, alias="set", description="its --set items")
    method: str | None = Field(None, description="a method its target runs (name or file)")


class GridFile(BaseModel):
    """``ablate --grid FILE``: named cells, each with its own --set items (and method)::

    name: mutators              # optional: the runs' name prefix (default the recipe's)
    recipe: my-target.yaml      # optional: else RECIPE on the command line
    repeats: 3                  # optional: else --repeats (default 3)
    set: [budget.max_generations=4]      # every cell
    cells:
      - {name: two-knobs, set: [slots.mutate.config.max_changes=2]}
      - {name: round-robin, set: [slots.mutate.config.order=round_robin]}
      - {name: dgm, method: dgm}
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str | None = Field(None, pattern=CELL_NAME)
    recipe: str | None = None
    method: str | None = None
    repeats: int | None = Field(None, ge=1)
    sets: list[str] = Field(default_factory=list, alias="set")
    cells: list[GridFileCell] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> GridFile:
        names = [c.name for c in self.cells]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"cell {twice[0]!r} is named twice")
        return self


def plan_grid(
    recipe: Path,
    slot: str,
    operators: list[str],
    sets: list[str],
    repeats: int,
    out: Path | None,
    method: str | None = None,
) -> Grid:
    """Check the slot, every operator (through the registry) and every cell's recipe, then
    create the grid folder. Nothing runs before all of it is valid."""
    if slot not in SLOTS:
        raise RecipeError(f"--slot: unknown slot {slot!r}; slots: {', '.join(SLOTS)}")
    ops = [o.strip() for o in operators if o.strip()]
    if not ops:
        raise RecipeError("--operators: give at least one operator")
    if len(set(ops)) != len(ops):
        raise RecipeError("--operators: an operator is named twice")
    for op in ops:
        try:
            resolve(slot, op, Path(recipe).parent)
        except RecipeError as exc:
            raise RecipeError(f"--operators: {exc.message}") from exc
    spec = {"slot": slot, "operators": ops, "method": _method_file(method, Path.cwd())}
    return _create(Path(recipe), spec, sets, repeats, out, stem=slot)


def plan_grid_file(
    grid_file: Path,
    recipe: Path | None,
    sets: list[str],
    repeats: int | None,
    out: Path | None,
    method: str | None = None,
) -> Grid:
    """A grid file's grid (:class:`GridFile`): checked whole, then created like
    :func:`plan_grid`. Paths in the file are relative to it; the command line's --set items
    come after the file's, its --repeats and --method win over the file's."""
    grid_file = Path(grid_file)
    gf, here = read_grid_file(grid_file), grid_file.resolve().parent
    if (gf.recipe is None) == (recipe is None):
        raise RecipeError(
            "name the recipe once: RECIPE on the command line or recipe: in the grid file",
            where=str(grid_file),
        )
    target = here / gf.recipe if gf.recipe is not None else Path(str(recipe))
    spec = {
        "cells": [GridCell(name=c.name, sets=c.sets, method=_method_file(c.method, here))
                  for c in gf.cells],
        "method": _method_file(method, Path.cwd()) or _method_file(gf.method, here),
        "name": gf.name,
    }  # fmt: skip
    return _create(target, spec, [*gf.sets, *sets], repeats or gf.repeats or 3, out, grid_file.stem)


def read_grid_file(path: Path) -> GridFile:
    """A grid file, validated (one line naming the key when it is not one)."""
    try:
        return GridFile.model_validate(recipe_mod.load_yaml(path))
    except ValidationError as exc:
        loc, msg = first_error(exc, model=GridFile)
        raise RecipeError(f"{loc}: {msg}" if loc else msg, where=str(path)) from exc


def _method_file(ref: str | None, base: Path) -> str | None:
    """A method reference as the grid keeps it: its file's absolute path."""
    return None if ref is None else str(recipe_mod.method_path(ref, base).resolve())


def _create(
    recipe: Path, spec: dict, sets: list[str], repeats: int, out: Path | None, stem: str
) -> Grid:
    """Every cell's recipe resolved (operator configs included) and its method told apart
    from every other cell's, then the grid folder made."""
    recipe = Path(recipe).resolve()
    base = recipe_mod.load(recipe, sets, method=spec.get("method"))
    name = spec.pop("name", None) or base.recipe.name.split("[", 1)[0]  # not its --set label
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = Path(out) if out is not None else Path("archive") / f"ablate-{name}-{stem}-{stamp}"
    grid = Grid(
        root.resolve(),
        GridSpec(recipe=str(recipe), sets=list(sets), repeats=repeats, name=name, **spec),
    )
    _check_cells(recipe, grid)
    if root.exists() and any(root.iterdir()):
        raise RunFolderError("output folder exists and is not empty", where=str(root))
    root.mkdir(parents=True, exist_ok=True)
    grid.save()
    return grid


def _check_cells(recipe: Path, grid: Grid) -> None:
    from rsiframe.study.compare import method_digest

    seen: dict[str, str] = {}
    for cell in grid.cells():
        try:
            resolved = recipe_mod.load(recipe, cell.sets, method=cell.method)
        except RecipeError as exc:
            raise RecipeError(f"cell {cell.name}: {exc.message}", where=exc.where) from exc
        if cell.repeat:
            continue
        other = seen.setdefault(method_digest(resolved.data), cell.name)
        if other != cell.name:
            raise RecipeError(
                f"cells {other} and {cell.name} resolve to the same method (compare would "
                "pool their runs); give them different settings"
            )


def open_grid(root: Path) -> Grid:
    path = Path(root).resolve() / GRID_FILE
    try:
        spec = GridSpec.model_validate_json(path.read_text())
    except FileNotFoundError as exc:
        raise RunFolderError(f"not an ablate grid (no {GRID_FILE})", where=str(root)) from exc
    except (OSError, ValidationError) as exc:
        raise RunFolderError(f"{GRID_FILE} is unreadable: {exc}", where=str(root)) from exc
    return Grid(path.parent, spec)


@dataclass
class CellResult:
    cell: Cell
    state: str  # finished | budget_exhausted | failed | skipped (already ended)
    seconds: float
    reason: str = ""

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["cell"] = {"name": self.cell.name, "repeat": self.cell.repeat}
        d["path"] = str(self.cell.path)
        return d


def _ended(path: Path) -> str | None:
    """The state of a run that has ended, None when it still needs work."""
    from rsiframe.archive.loader import load_run

    loaded = load_run(path)
    if loaded.live:
        raise RunFolderError("a process is driving this run now", where=str(path))
    terminal = loaded.state.terminal
    if terminal is None or terminal["state"] == "interrupted":
        return None
    return str(terminal["state"])


def run_grid(
    grid: Grid,
    *,
    on_start: Callable[[Cell, int, int], None] | None = None,
    on_done: Callable[[CellResult], None] | None = None,
    on_warnings: Callable[[Cell, list[str]], None] | None = None,
) -> list[CellResult]:
    """Drive every cell that still needs work, one after another (a KeyboardInterrupt
    leaves the current run interrupted and resumable with the grid); ``on_warnings``: a
    new cell's start warnings."""
    from rsiframe.engine.loop import Engine, RunFailure

    cells = grid.cells()
    results = []
    for i, cell in enumerate(cells):
        t0 = time.monotonic()
        started = (cell.path / "events.jsonl").is_file()
        ended = _ended(cell.path) if started else None
        if ended is not None:
            result = CellResult(cell, ended, 0.0, "already ended")
        else:
            if on_start is not None:
                on_start(cell, i, len(cells))
            if started:
                engine, _ = Engine.open(cell.path)
            else:
                if cell.path.exists() and not any(cell.path.iterdir()):
                    cell.path.rmdir()
                engine = Engine.create(
                    Path(grid.spec.recipe), cell.sets, cell.path, method=cell.method
                )
                if on_warnings is not None and engine.state.warnings:
                    on_warnings(cell, engine.state.warnings)
            reason = ""
            try:
                state = engine.drive()
            except RunFailure as exc:
                state, reason = "failed", str(exc)
            finally:
                engine.close()
            terminal = engine.state.terminal or {}
            result = CellResult(
                cell, state, time.monotonic() - t0, reason or str(terminal.get("reason", ""))
            )
        results.append(result)
        if on_done is not None:
            on_done(result)
    return results
