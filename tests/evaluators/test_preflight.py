"""rsiframe.evaluators.preflight: the local engine's checks before a run folder exists; with
``sandbox: docker`` every task's image is checked and built (the Docker code imported only
then)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.evaluators import preflight
from rsiframe.recipe.evaluator import LocalEngineConfig
from rsiframe.sandbox import taskimage
from rsiframe.tasks.taskset import TaskSet
from tests.support.mini import write_tasks


def test_only_a_docker_sandbox_has_anything_to_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tasks(tmp_path / "tasks", 3)
    ts = TaskSet.load(tmp_path / "tasks")
    asked: list[dict[str, Path]] = []
    monkeypatch.setattr(taskimage, "preflight", asked.append)
    for sandbox in ("auto", "bwrap", "process"):
        preflight.local(LocalEngineConfig(agent="x", sandbox=sandbox), ts, ["t1", "t2"])
    assert asked == []
    preflight.local(LocalEngineConfig(agent="x", sandbox="docker"), ts, ["t1", "t3"])
    assert asked == [{"t1": ts.tasks["t1"].path, "t3": ts.tasks["t3"].path}]
