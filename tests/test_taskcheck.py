"""`rsiframe tasks check`: one line per static problem (fast); the oracle on both engines."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import REPO, cli

TERMINAL = REPO / "tasks" / "terminal"


def _copy(tmp_path: Path, *names: str) -> Path:
    root = tmp_path / "set"
    for n in names:
        shutil.copytree(TERMINAL / n, root / n)
    return root


def test_a_clean_task_set_passes(tmp_path: Path) -> None:
    res = cli("tasks", "check", str(_copy(tmp_path, "hello-file", "csv-sum")))
    assert res.exit_code == 0, res.stdout + res.stderr
    assert res.stdout == ""


def test_each_problem_is_one_line(tmp_path: Path) -> None:
    root = _copy(tmp_path, "hello-file", "csv-sum", "count-lines")
    shutil.rmtree(root / "hello-file" / "solution")
    (root / "csv-sum" / "tests" / "test.sh").unlink()
    toml = root / "count-lines" / "task.toml"
    toml.write_text(toml.read_text().replace('workdir = "/app"', 'workdir = "/app"\ncpus = "all"'))
    res = cli("tasks", "check", str(root))
    assert res.exit_code == 1
    lines = res.stdout.strip().splitlines()
    assert any(x.startswith("hello-file: no solution/solve.sh") for x in lines)
    assert any(x.startswith("csv-sum: task has no verifier") for x in lines)
    assert any(x.startswith("count-lines: Harbor rejects it") for x in lines)
    assert len(lines) >= 3 and "Traceback" not in res.stderr


def test_a_folder_without_tasks_is_bad_input(tmp_path: Path) -> None:
    res = cli("tasks", "check", str(tmp_path))
    assert res.exit_code == 2 and "no task here" in res.stderr


@pytest.mark.e2e
def test_the_oracle_scores_every_shipped_terminal_task_on_both_engines() -> None:
    res = cli("tasks", "check", str(TERMINAL), "--oracle", "--json")
    assert res.exit_code == 0, res.stdout
    import json

    report = json.loads(res.stdout)
    assert report["tasks"] >= 20
    for engine in ("local", "harbor"):
        assert set(report["oracle"][engine].values()) == {1.0}


@pytest.mark.e2e
def test_the_oracle_reports_a_wrong_reference_solution(tmp_path: Path) -> None:
    root = _copy(tmp_path, "hello-file", "reverse-lines")
    solve = root / "reverse-lines" / "solution" / "solve.sh"
    solve.write_text(solve.read_text().replace("tac lines.txt", "cat lines.txt"))
    res = cli("tasks", "check", str(root), "--oracle")
    assert res.exit_code == 1
    lines = res.stdout.strip().splitlines()
    assert sorted(lines) == [
        "reverse-lines: the reference solution scores 0 on harbor",
        "reverse-lines: the reference solution scores 0 on local",
    ]
