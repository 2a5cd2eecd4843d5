"""`rsiframe tasks check`: one line per static problem (fast); the oracle on both engines."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.cli import cli
from tests.support.taskcheck import copy_tasks


def test_a_clean_task_set_passes(tmp_path: Path) -> None:
    res = cli("tasks", "check", str(copy_tasks(tmp_path, "hello-file", "csv-sum")))
    assert res.exit_code == 0, res.stdout + res.stderr
    assert res.stdout == ""


def test_each_problem_is_one_line(tmp_path: Path) -> None:
    root = copy_tasks(tmp_path, "hello-file", "csv-sum", "count-lines")
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
