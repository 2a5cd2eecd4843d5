"""rsiframe.audit.drift: what on disk no longer matches a run's locks (its operators' code,
its task set), read without importing or writing anything."""

from __future__ import annotations

import shutil
from pathlib import Path

from rsiframe.archive.runfolder import RunPaths
from rsiframe.audit.drift import operator_drift, task_drift
from rsiframe.slots.identity import file_digest
from rsiframe.tasks.taskset import TaskLock, TaskSet
from tests.support.mini import write_tasks

SPLIT = {"train": ["t1", "t2"], "gate": ["t3"], "sealed": ["t4"]}


def _run(tmp_path: Path) -> tuple[RunPaths, Path]:
    tasks = tmp_path / "tasks"
    write_tasks(tasks, 4)
    paths = RunPaths(tmp_path / "run")
    paths.root.mkdir()
    paths.write_json(paths.tasks_lock, TaskLock.freeze(TaskSet.load(tasks), SPLIT).to_json())
    return paths, tasks


def test_the_task_set_on_disk_against_the_lock(tmp_path: Path) -> None:
    paths, tasks = _run(tmp_path)
    assert task_drift(paths) == ([], None)
    (tasks / "t3" / "tests" / "need.txt").write_text("0\n")  # a gate task made easy
    problems, skipped = task_drift(paths)
    assert skipped is None and len(problems) == 1
    assert (
        problems[0].startswith("task set on disk differs from the run's lock")
        and "t3" in problems[0]
    )


def test_a_task_set_elsewhere_is_given_or_skipped_with_the_reason(tmp_path: Path) -> None:
    paths, tasks = _run(tmp_path)
    moved = tmp_path / "moved"
    shutil.move(tasks, moved)
    assert task_drift(paths) == ([], f"the task set is not at {tasks} (give it with --tasks)")
    assert task_drift(paths, moved) == ([], None)


def test_an_unreadable_lock_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    paths, _ = _run(tmp_path)
    paths.tasks_lock.write_text("not json")
    assert task_drift(paths) == (["tasks.lock.json is not valid JSON"], None)
    assert operator_drift(paths) == ["recipe.lock.json is missing"]


def test_locked_operator_files_are_rehashed_on_disk(tmp_path: Path) -> None:
    paths, _ = _run(tmp_path)
    mine = tmp_path / "gate.py"
    mine.write_text("class Gate: ...\n")
    ident = {
        "ref": "gate.py:Gate",
        "kind": "file",
        "file": str(mine),
        "sha256": file_digest(str(mine)),
    }
    paths.write_json(
        paths.recipe_lock,
        {"operators": {"gate": ident, "mutate": {"ref": "candidate:op.py:M", "kind": "candidate"}}},
    )
    assert operator_drift(paths) == []
    mine.write_text("class Gate:  # admits everything now\n    ...\n")
    assert operator_drift(paths) == [
        f"operator code on disk differs from the run's lock: slots.gate gate.py:Gate ({mine})"
    ]
