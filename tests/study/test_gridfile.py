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


PYFIX_GRID = REPO / "recipes" / "pyfix" / "grid.yaml"
POLICIES = {"hill_climb", "gepa-policy", "dgm-policy", "islands-policy"}
OWN_MUTATOR = {"dgm", "openevolve", "shinka"}
SHARED_MUTATOR = POLICIES | {f"{m}-shared" for m in OWN_MUTATOR}


def _pyfix_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict]:
    """Every cell of the pyfix methods grid, resolved as ``ablate`` resolves it."""
    from rsiframe.recipe import load as recipe_mod
    from rsiframe.study.ablate import plan_grid_file

    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_API_KEY", "stub")
    grid = plan_grid_file(PYFIX_GRID, None, [], None, tmp_path / "grid")
    recipe = Path(grid.spec.recipe)
    return {
        c.name: recipe_mod.load(recipe, c.sets, method=c.method).data
        for c in grid.cells()
        if c.repeat == 0
    }


def test_the_pyfix_methods_grid_gives_every_cell_the_same_budget_and_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cells = _pyfix_cells(tmp_path, monkeypatch)
    assert set(cells) == SHARED_MUTATOR | OWN_MUTATOR
    budgets = {name: data["budget"] for name, data in cells.items()}
    first = budgets["hill_climb"]
    assert first["max_task_runs"] == 1500 and first["max_model_tokens"] == 2_000_000
    assert first["max_candidates"] is None and first["max_evaluations"] is None
    drifted = {name: b for name, b in budgets.items() if b != first}
    assert not drifted, f"budgets differ from hill_climb's {first}: {drifted}"
    splits = {name: data["tasks"]["split"] for name, data in cells.items()}
    assert all(s == splits["hill_climb"] for s in splits.values())
    assert {d["evaluator"]["config"]["concurrency"] for d in cells.values()} == {3}


def test_the_pyfix_methods_grid_separates_policy_from_mutator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cells = _pyfix_cells(tmp_path, monkeypatch)
    select = {name: data["slots"]["select"]["operator"] for name, data in cells.items()}
    mutate = {name: data["slots"]["mutate"]["operator"] for name, data in cells.items()}
    # four policies around one mutator, with the target's llm_edit config
    assert {mutate[n] for n in SHARED_MUTATOR} == {"llm_edit"}
    configs = [cells[n]["slots"]["mutate"]["config"] for n in SHARED_MUTATOR]
    assert all(
        (c["model"], c["temperature"], c["max_tokens"]) == ("proposer", 0.8, 2048) for c in configs
    )
    assert len({select[n] for n in POLICIES}) == 4
    # each method with its own mutator beside the same method with the shared one: the
    # pair differs in the mutate slot only
    own = {"dgm": "agent_cli", "openevolve": "openevolve_edit", "shinka": "ucb_edit"}
    for method, mutator in own.items():
        mine, shared = cells[method], cells[f"{method}-shared"]
        assert mutate[method] == mutator
        rest = ("slots", "name")  # the cells' run names differ too
        assert {k: v for k, v in mine.items() if k not in rest} == {
            k: v for k, v in shared.items() if k not in rest
        }
        assert {k: v for k, v in mine["slots"].items() if k != "mutate"} == {
            k: v for k, v in shared["slots"].items() if k != "mutate"
        }


def test_the_pyfix_grid_dgm_cell_samples_its_diagnosis_and_self_improvement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unsampled self-improvement call is answered from the gateway's cache: every
    child of one diagnosis would be the same child. The grid's dgm cell samples both calls
    (the agent gets the operator's temperature through ``{temperature}``)."""
    from rsiframe.operators.agent_cli import AgentCliConfig, render_command

    cells = _pyfix_cells(tmp_path, monkeypatch)
    dgm = cells["dgm"]["slots"]
    assert dgm["analyze"]["config"]["temperature"] > 0
    mutate = dgm["mutate"]["config"]
    assert mutate["temperature"] > 0
    cfg = AgentCliConfig.model_validate(mutate)
    line = render_command(cfg, "Add this exact line to prompt.md: X", "/work")
    assert line.endswith(f"--temperature {mutate['temperature']!r}"), line
    # dgm-shared diagnoses the same way: the pair still differs in mutate only
    assert cells["dgm-shared"]["slots"]["analyze"] == dgm["analyze"]
