"""`ablate`, `compare` and `fidelity` on real runs of the mini task set (and, with `-m e2e`,
a small sat3 grid end to end)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, cli, events, make_mini, status_json

from rsiframe.engine.loop import Engine
from rsiframe.study import ablate as ablate_mod
from rsiframe.study.fidelity import ItemResult, judge

METHOD_KEYS = {
    "name",
    "method_digest",
    "runs",
    "names",
    "unfinished_runs",
    "train",
    "gate",
    "sealed",
    "evaluations",
    "task_runs",
    "model_tokens",
    "cost_usd",
    "wall_s",
}


@dataclass
class Grid:
    root: Path
    recipe: Path
    first_events: bytes  # the first cell's archive before --resume
    resume_stdout: str


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Grid:
    """A 2 operators x 2 repeats grid: cell 0 ends, cell 1 starts and 'crashes' before its
    first step, the rest never start; `ablate --resume` finishes it."""
    base = tmp_path_factory.mktemp("cmp")
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


def compare_json(*args: object) -> dict:
    res = cli("compare", *args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


# -- ablate ---------------------------------------------------------------------------


def test_ablate_runs_every_operator_with_the_same_seeds_and_budget(grid: Grid) -> None:
    runs = sorted(p.name for p in grid.root.iterdir() if p.is_dir())
    assert runs == ["best-r0", "best-r1", "uniform-r0", "uniform-r1"]
    locks = {r: json.loads((grid.root / r / "recipe.lock.json").read_text()) for r in runs}
    for r, lock in locks.items():
        op, repeat = r.split("-r")
        resolved = lock["resolved"]
        assert resolved["slots"]["select"]["operator"] == op
        assert resolved["random_seed"] == int(repeat)
        assert resolved["budget"] == locks["best-r0"]["resolved"]["budget"]
    status = json.loads(cli("status", grid.root / "uniform-r1", "--json").stdout)
    assert status["state"] == "finished"


def test_ablate_resume_finishes_the_grid_and_leaves_ended_runs_alone(grid: Grid) -> None:
    assert (grid.root / "best-r0" / "events.jsonl").read_bytes() == grid.first_events
    # the run that was created but never driven was resumed, not replaced
    events = (grid.root / "uniform-r0" / "events.jsonl").read_text().splitlines()
    sessions = [json.loads(e) for e in events if '"session_started"' in e]
    assert [s["data"]["resumed"] for s in sessions] == [False, True]
    # and the grid ends with the compare table
    assert "compare: 2 methods, 4 runs, every run verified" in grid.resume_stdout


def test_ablate_refuses_an_operator_of_another_slot_before_any_run(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    out = tmp_path / "grid"
    res = cli("ablate", mini.recipe, "--slot", "select", "--operators", "best,always", "--out", out)
    assert res.exit_code == 2
    assert res.stderr.strip().count("\n") == 0
    assert "unknown select operator 'always'" in res.stderr
    assert not out.exists()


# -- compare ---------------------------------------------------------------------------


def test_compare_groups_repeats_into_methods_with_cis_over_runs(grid: Grid) -> None:
    report = compare_json(grid.root)
    assert set(report) == {"methods", "pairs", "unfinished", "refused", "alpha", "notes"}
    assert report["refused"] == [] and report["unfinished"] == []
    methods = {m["name"]: m for m in report["methods"]}
    assert set(methods) == {"mini.select-best", "mini.select-uniform"}
    for m in methods.values():
        assert set(m) == METHOD_KEYS
        assert len(m["runs"]) == 2
        for split in ("train", "gate", "sealed"):
            est = m[split]
            assert est["n"] == 2 and est["tasks"] == {"train": 4, "gate": 4, "sealed": 2}[split]
            lo, hi = est["ci"]
            assert lo <= est["mean"] <= hi
        assert m["evaluations"] > 3 and m["model_tokens"] == 0 and m["cost_usd"] == 0
    for op in ("best", "uniform"):  # task runs: the archive's count, and the tasks that ran
        runs = [grid.root / f"{op}-r{k}" for k in (0, 1)]
        used = [status_json(r)["budget"]["used"]["task_runs"] for r in runs]
        ran = [sum(e["type"] == "task_finished" for e in events(r)) for r in runs]
        assert methods[f"mini.select-{op}"]["task_runs"] == sum(used) / 2 == sum(ran) / 2
    assert (
        methods["mini.select-best"]["method_digest"]
        != methods["mini.select-uniform"]["method_digest"]
    )
    (pair,) = report["pairs"]
    assert pair["design"] == "paired by seed" and pair["units"] == 2
    # two seeds can never decide (an exact sign-flip test over 2 pairs gives p >= 0.5)
    assert pair["verdict"] == "cannot_tell" and pair["p"] is None
    assert pair["p_min"] >= 0.5 and pair["reads"].startswith("cannot tell with 2 runs")


def test_compare_means_are_the_champions_verified_scores(grid: Grid) -> None:
    report = compare_json(grid.root / "best-r0", grid.root / "best-r1")
    (m,) = report["methods"]
    scores = []
    for r in ("best-r0", "best-r1"):
        st = json.loads(cli("status", grid.root / r, "--json").stdout)
        champ = next(c for c in st["candidates"] if c["id"] == st["champion"])
        scores.append(champ["scores"]["gate"])
    assert m["gate"]["mean"] == pytest.approx(sum(scores) / 2)


def test_compare_by_run_shows_every_run_with_cis_over_tasks(grid: Grid) -> None:
    report = compare_json(grid.root, "--by", "run")
    assert len(report["methods"]) == 4
    for m in report["methods"]:
        assert len(m["runs"]) == 1
        assert m["gate"]["n"] == m["sealed"]["n"] == 1
        assert (m["gate"]["tasks"], m["sealed"]["tasks"]) == (4, 2)  # the mini split's
    assert len(report["pairs"]) == 6
    assert {p["design"] for p in report["pairs"]} == {"paired by task"}


def test_compare_refuses_a_different_task_set_unless_forced(grid: Grid, tmp_path: Path) -> None:
    other = make_mini(tmp_path / "other", generations=1, children=1)
    (other.tasks / "t4" / "tests" / "need.txt").write_text("5\n")  # a different task t4
    assert cli("run", other.recipe, "--out", tmp_path / "odd", "--quiet").exit_code == 0
    res = cli("compare", grid.root, tmp_path / "odd")
    assert res.exit_code == 2
    line = res.stderr.strip()
    assert "\n" not in line
    assert "different task-set fingerprint" in line and "t4" in line and "--force" in line
    forced = compare_json(grid.root, tmp_path / "odd", "--force")
    (refused,) = forced["refused"]
    assert refused["what"] == "task-set fingerprint" and len(refused["runs"]) == 1
    text = cli("compare", grid.root, tmp_path / "odd", "--force").stdout
    assert "(forced)" in text


def test_compare_refuses_a_run_that_fails_verification(grid: Grid, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(grid.root / "best-r1", bad, symlinks=True)
    recipe = bad / "recipe.yaml"  # the frozen recipe no longer matches its lock
    recipe.write_text(recipe.read_text().replace("random_seed: 1", "random_seed: 5"))
    res = cli("compare", grid.root / "best-r0", bad)
    assert res.exit_code == 2
    assert "\n" not in res.stderr.strip()
    assert "fails verification: recipe.yaml differs from recipe.lock.json" in res.stderr
    assert str(bad) in res.stderr
    assert "compare reads only verified runs" in res.stderr


def test_compare_writes_png_and_a_self_contained_html(grid: Grid, tmp_path: Path) -> None:
    html, png = tmp_path / "cmp.html", tmp_path / "png"
    res = cli("compare", grid.root, "--html", html, "--png", png)
    assert res.exit_code == 0, res.stderr
    plot = png / "best-gate-vs-evaluations.png"
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert (png / "best-gate-vs-task-runs.png").read_bytes().startswith(b"\x89PNG")
    assert not (png / "best-gate-vs-cost.png").exists()  # no cost was spent
    page = html.read_text()
    assert page.count("data:image/png;base64,") == 2
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert "mini.select-best" in page and "pairs on sealed" in page
    assert "cannot tell with 2 runs" in page and "P(A &gt; B)" not in page
    # the terminal view holds the table, the matrix and the curve
    assert "best admitted gate so far" in res.stdout and "seed → champion" in res.stdout


# -- fidelity --------------------------------------------------------------------------


def test_fidelity_passes_on_the_deterministic_mini_set(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    res = cli("fidelity", mini.recipe, "--out", tmp_path / "fid", "--json")
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    v = report["verdict"]
    assert v["passed"] and v["deterministic"]
    assert v["items"] == 4 and v["agree_framework_direct"] == 1.0
    assert v["mean_diff"] == 0.0
    # the seed (level 1) solves none of the gate tasks t2, t4, t6, t8
    assert {i["task"]: i["framework"] for i in report["items"]} == dict.fromkeys(
        ["t2", "t4", "t6", "t8"], 0.0
    )
    # the framework's run is a real, verifiable run stopped after the seed
    (run,) = report["runs"]
    assert cli("verify", run).exit_code == 0


def _items(triples: list[tuple[float, float, float]]) -> list[ItemResult]:
    return [
        ItemResult(repeat=0, task=f"t{i}", framework=f, direct_a=a, direct_b=b)
        for i, (f, a, b) in enumerate(triples)
    ]


def test_fidelity_rule_on_a_deterministic_set_needs_exact_agreement() -> None:
    v = judge(_items([(1, 1, 1), (0, 0, 0), (1, 0, 0)]))
    assert v.deterministic and not v.passed
    assert "framework differs on 1" in v.reason


def test_fidelity_rule_on_a_noisy_set_uses_mcnemar() -> None:
    # as noisy inside the framework as outside: passes
    same = [(1, 0, 1), (0, 1, 0), (1, 1, 1), (0, 0, 0)] * 5
    assert judge(_items(same)).passed
    # framework differs from direct on 10 items where the direct runs agree, and the
    # direct runs differ on only 1 other: b = 10, c = 1, p = 12/2048 < 0.05
    noisy = [(1, 0, 0)] * 10 + [(0, 0, 1)] + [(1, 1, 1)] * 9
    v = judge(_items(noisy))
    assert not v.deterministic and not v.passed
    assert (v.disagreement_b, v.disagreement_c) == (10, 1)
    assert v.p_more_disagreement == pytest.approx(12 / 2048)
    assert v.mean_diff == pytest.approx(0.5)


# -- end to end ------------------------------------------------------------------------


@pytest.mark.e2e
def test_ablate_grid_on_sat3_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "grid"
    res = cli(
        "ablate",
        REPO / "recipes" / "sat3-quickstart.yaml",
        "--slot",
        "select",
        "--operators",
        "best,uniform",
        "--repeats",
        "2",
        "--set",
        "budget.max_evaluations=9",
        "--out",
        out,
        "--json",
        "--quiet",
    )
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == str(out.resolve())
    report = json.loads("\n".join(lines[1:]))
    assert [len(m["runs"]) for m in report["methods"]] == [2, 2]
    for m in report["methods"]:
        assert m["evaluations"] <= 9
        assert m["sealed"]["n"] == 2
    assert cli("verify", out / "uniform-r1").exit_code == 0


def test_compare_refuses_a_run_with_an_edited_certificate(grid: Grid, tmp_path: Path) -> None:
    bad = tmp_path / "edited"
    shutil.copytree(grid.root / "uniform-r0", bad, symlinks=True)
    lines = (bad / "events.jsonl").read_text().splitlines(keepends=True)
    i = next(i for i, line in enumerate(lines) if '"evaluation_certified"' in line)
    lines[i] = lines[i].replace('"attempt":1', '"attempt":2', 1)  # rebind it to another attempt
    (bad / "events.jsonl").write_text("".join(lines))
    res = cli("compare", grid.root / "uniform-r1", bad)
    assert res.exit_code == 2
    assert "\n" not in res.stderr.strip()
    assert f"{bad}: fails verification" in res.stderr


# -- the viewer groups a grid ------------------------------------------------------------


def test_viewer_runs_screen_groups_the_grid_by_operator(grid: Grid, tmp_path: Path) -> None:
    import asyncio

    from textual.widgets import DataTable

    from rsiframe.viewer.app import ViewerApp
    from rsiframe.viewer.screens.runs import RunsScreen

    archive = tmp_path / "archive"  # a folder holding the grid: its runs are found inside it
    shutil.copytree(grid.root, archive / "grid", symlinks=True)

    async def drive() -> None:
        app = ViewerApp(archive)
        async with app.run_test(size=(200, 40)) as pilot:
            for _ in range(100):
                await pilot.pause(0.05)
                if isinstance(app.screen, RunsScreen) and app.screen.is_ready():
                    break
            table = app.screen.query_one(DataTable)
            assert table.row_count == 4
            rows = [str(table.get_row_at(i)[0]) for i in range(4)]
            assert rows == ["grid: select=best"] * 2 + ["grid: select=uniform"] * 2
            await pilot.press("q")

    asyncio.run(drive())


def test_compare_refuses_a_copied_run(grid: Grid, tmp_path: Path) -> None:
    """A copy verifies (it is the same signed archive), but counted twice it would shrink
    every CI and p-value: it is refused, in one line."""
    copy = tmp_path / "copy"
    shutil.copytree(grid.root / "best-r0", copy, symlinks=True)
    res = cli("compare", grid.root, copy)
    assert res.exit_code == 2
    line = res.stderr.strip()
    assert "\n" not in line
    assert f"{copy} is a copy of {grid.root / 'best-r0'}" in line and "counts once" in line
