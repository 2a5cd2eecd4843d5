"""What on disk no longer matches a run's locks: its operators' code and its task set.

Separate from archive integrity (an edited task file does not make the archive wrong):
``verify`` reports each as a named check, ``status`` as notes, and ``resume`` refuses both.
Read-only; nothing is imported or written.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rsiframe.archive.runfolder import RunPaths
from rsiframe.errors import RsiError
from rsiframe.slots import identity as opidentity
from rsiframe.tasks.taskset import TaskLock


def operator_drift(paths: RunPaths) -> list[str]:
    """Locked operator files (and distributions) that differ on disk."""
    try:
        lock = paths.read_json(paths.recipe_lock)
    except RsiError as exc:
        return [exc.message]
    return opidentity.drift(lock.get("operators"))


def task_drift(paths: RunPaths, tasks_root: Path | None = None) -> tuple[list[str], str | None]:
    """(problems, why skipped): the task set on disk against the run's task lock."""
    try:
        lock = TaskLock.from_json(paths.read_json(paths.tasks_lock))
    except RsiError as exc:
        return [exc.message], None
    if tasks_root is not None:
        lock = replace(lock, root=str(Path(tasks_root).resolve()))
    if not Path(lock.root).is_dir():
        return [], f"the task set is not at {lock.root} (give it with --tasks)"
    try:
        lock.check()
    except RsiError as exc:
        return [exc.message.replace("task set changed since the run began", _TASKS)], None
    return [], None


_TASKS = "task set on disk differs from the run's lock"
