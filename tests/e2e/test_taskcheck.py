"""`rsiframe tasks check --oracle` on both engines (e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.paths import TERMINAL
from tests.support.taskcheck import copy_tasks

pytestmark = pytest.mark.e2e


def test_the_oracle_scores_every_shipped_terminal_task_on_both_engines() -> None:
    res = cli("tasks", "check", str(TERMINAL), "--oracle", "--json")
    assert res.exit_code == 0, res.stdout
    import json

    report = json.loads(res.stdout)
    assert report["tasks"] >= 20
    for engine in ("local", "harbor"):
        assert set(report["oracle"][engine].values()) == {1.0}


def test_the_oracle_reports_a_wrong_reference_solution(tmp_path: Path) -> None:
    root = copy_tasks(tmp_path, "hello-file", "reverse-lines")
    solve = root / "reverse-lines" / "solution" / "solve.sh"
    solve.write_text(solve.read_text().replace("tac lines.txt", "cat lines.txt"))
    res = cli("tasks", "check", str(root), "--oracle")
    assert res.exit_code == 1
    lines = res.stdout.strip().splitlines()
    assert sorted(lines) == [
        "reverse-lines: the reference solution scores 0 on harbor",
        "reverse-lines: the reference solution scores 0 on local",
    ]
