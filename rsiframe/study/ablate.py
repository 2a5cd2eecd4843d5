"""``rsiframe ablate``: one slot's operators times N seeds, from one recipe, as one resumable grid.

Repeat ``r`` of every operator runs with ``random_seed`` r, so the operators meet the same
seeds; every other key (budget included) comes from the recipe and its ``--set`` items, so
budgets are identical. The grid is a folder (:mod:`rsiframe.study.gridspec`).

``--resume`` finishes what is left: cells never started are created, interrupted runs are
resumed, ended runs are left as they are.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pydantic import ValidationError

from rsiframe.api import SLOTS
from rsiframe.errors import RecipeError, RunFolderError
from rsiframe.recipe import load as recipe_mod
from rsiframe.slots.registry import resolve
from rsiframe.study.gridspec import GRID_FILE, GridSpec, cell_dir


@dataclass(frozen=True)
class Cell:
    operator: str
    repeat: int
    path: Path
    sets: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.operator}-r{self.repeat}"


@dataclass
class Grid:
    root: Path
    spec: GridSpec

    def cells(self) -> list[Cell]:
        s = self.spec
        return [
            Cell(
                op,
                r,
                self.root / cell_dir(op, r),
                [
                    *s.sets,
                    f"slots.{s.slot}.operator={op}",
                    f"random_seed={r}",
                    f"name={s.name}.{s.slot}-{op}",
                ],
            )
            for r in range(s.repeats)
            for op in s.operators
        ]

    def save(self) -> None:
        (self.root / GRID_FILE).write_text(json.dumps(self.spec.model_dump(), indent=2) + "\n")


def plan_grid(
    recipe: Path,
    slot: str,
    operators: list[str],
    sets: list[str],
    repeats: int,
    out: Path | None,
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
    recipe = Path(recipe).resolve()
    base = recipe_mod.load(recipe, sets)
    name = base.recipe.name.split("[", 1)[0]  # the recipe's own name, not one for its --set
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = Path(out) if out is not None else Path("archive") / f"ablate-{name}-{slot}-{stamp}"
    spec = GridSpec(
        recipe=str(recipe), slot=slot, operators=ops, sets=list(sets), repeats=repeats, name=name
    )
    grid = Grid(root.resolve(), spec)
    for cell in grid.cells():  # every cell's recipe resolves (operator configs included)
        recipe_mod.load(recipe, cell.sets)
    if root.exists() and any(root.iterdir()):
        raise RunFolderError("output folder exists and is not empty", where=str(root))
    root.mkdir(parents=True, exist_ok=True)
    grid.save()
    return grid


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
        d["cell"] = {"operator": self.cell.operator, "repeat": self.cell.repeat}
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
) -> list[CellResult]:
    """Drive every cell that still needs work, one after another (a KeyboardInterrupt
    leaves the current run interrupted and resumable with the grid)."""
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
                engine = Engine.create(Path(grid.spec.recipe), cell.sets, cell.path)
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
