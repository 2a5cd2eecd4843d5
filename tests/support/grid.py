"""The ablation grid that ablate's, compare's and the viewer's tests read (the ``grid``
fixture): 2 operators x 2 repeats of the mini project."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from rsiframe.engine.loop import Engine
from rsiframe.study import ablate as ablate_mod
from tests.support.cli import cli
from tests.support.mini import make_mini


@dataclass
class Grid:
    root: Path
    recipe: Path
    first_events: bytes  # the first cell's archive before --resume
    resume_stdout: str


def build_grid(base: Path) -> Grid:
    """Cell 0 ends, cell 1 starts and 'crashes' before its first step, the rest never
    start; `ablate --resume` finishes it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RSIFRAME_KEY_DIR", str(base / "keys"))
        mini = make_mini(base / "proj", generations=1, children=2)
        g = ablate_mod.plan_grid(mini.recipe, "select", ["best", "uniform"], [], 2, base / "grid")
        cells = g.cells()

        def stop_after_first(result: ablate_mod.CellResult) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            ablate_mod.run_grid(g, on_done=stop_after_first)
        first = (cells[0].path / "events.jsonl").read_bytes()
        Engine.create(Path(g.spec.recipe), cells[1].sets, cells[1].path).close()
        res = cli("ablate", "--resume", g.root, "--quiet")
        assert res.exit_code == 0, res.stderr
        return Grid(g.root, mini.recipe, first, res.stdout)


# ablate --grid FILE: two cells that need different mutate configs
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
