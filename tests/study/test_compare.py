"""`ablate`, `compare` and `fidelity` on real runs of the mini task set (and, with `-m e2e`,
a small sat3 grid end to end)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli import cli, events, status_json
from tests.support.grid import Grid
from tests.support.mini import make_mini

METHOD_KEYS = {
    "name",
    "method_digest",
    "runs",
    "names",
    "mutator",
    "unfinished_runs",
    "train",
    "gate",
    "sealed",
    "evaluations",
    "task_runs",
    "model_tokens",
    "model_calls",  # per run, mean: every call through the gateway
    "model_calls_cached",  # of them, answered from its ledger at no cost
    "cost_usd",
    "wall_s",
}


def compare_json(*args: object) -> dict:
    res = cli("compare", *args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


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
        assert m["mutator"] == "knobs (random)"  # what made the children (issue 31)
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
    assert "<th>mutate</th>" in page and "mutate" in res.stdout  # the mutator column


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


def test_the_methods_table_shows_model_calls_paid_and_cached_apart() -> None:
    from types import SimpleNamespace

    from rsiframe.study.compare import Method
    from rsiframe.study.compare_text import model_calls_cell

    runs = [
        SimpleNamespace(model_calls=6, model_cached=3),
        SimpleNamespace(model_calls=4, model_cached=1),
    ]
    m = Method("m", "d", runs, {}, {})  # type: ignore[arg-type]
    assert model_calls_cell(m) == "5, 2 from cache"  # per run, mean
    none_cached = [SimpleNamespace(model_calls=2, model_cached=0)]
    assert model_calls_cell(Method("m", "d", none_cached, {}, {})) == "2"  # type: ignore[arg-type]


def test_the_mutate_column_names_the_operator_and_its_model() -> None:
    """A table never puts a knob mutator beside a model unnoticed (issue 31)."""
    from rsiframe.study.compare import mutator_of

    models = {"models": {"proposer": {"model": "gpt-5-mini"}}}
    knobs = {"slots": {"mutate": {"operator": "knobs", "config": {"order": "round_robin"}}}}
    assert mutator_of(knobs) == "knobs (round_robin)"
    reflect = {"slots": {"mutate": {"operator": "gepa_reflect", "config": {"model": "proposer"}}}}
    assert mutator_of({**reflect, **models}) == "gepa_reflect (proposer: gpt-5-mini)"
    agent = {"operator": "agent_cli", "config": {"model": "proposer", "profile": "command"}}
    assert mutator_of({"slots": {"mutate": agent}, **models}) == (
        "agent_cli (command, proposer: gpt-5-mini)"
    )
    wrapped = {"operator": "round_robin", "config": {"operator": "llm_edit", "config": {}}}
    assert mutator_of({"slots": {"mutate": wrapped}}) == "round_robin llm_edit"
    assert mutator_of({"slots": {}}) == "?"
