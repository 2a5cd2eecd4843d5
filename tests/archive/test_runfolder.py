"""rsiframe.archive.runfolder: what makes a folder a run folder, its JSON files, and the lock
that marks a live run (one driver at a time; readers probe it without taking it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.archive.runfolder import RunLock, RunPaths, is_live
from rsiframe.certs.keys import protected_folders
from rsiframe.errors import RunFolderError


def _run_folder(root: Path) -> RunPaths:
    root.mkdir()
    for name in ("events.jsonl", "pubkey.pem", "recipe.lock.json"):
        (root / name).write_text("")
    return RunPaths(root)


def test_a_run_folder_needs_its_archive_key_and_recipe_lock(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="run folder not found"):
        RunPaths(tmp_path / "nope").check()
    paths = _run_folder(tmp_path / "run")
    assert paths.check() is paths
    paths.pubkey.unlink()
    with pytest.raises(RunFolderError, match=r"not a run folder \(pubkey.pem is missing\)"):
        paths.check()


def test_json_files_are_written_canonical_and_read_as_objects_only(tmp_path: Path) -> None:
    paths = _run_folder(tmp_path / "run")
    paths.write_json(paths.tasks_lock, {"b": 1, "a": [1, 2]})
    assert paths.tasks_lock.read_text() == '{"a":[1,2],"b":1}\n'
    assert paths.read_json(paths.tasks_lock) == {"a": [1, 2], "b": 1}
    paths.evaluator_lock.write_text("[1, 2]")
    with pytest.raises(RunFolderError, match=r"evaluator\.lock\.json is not a JSON object"):
        paths.read_json(paths.evaluator_lock)
    paths.evaluator_lock.write_bytes(b"\xff{")
    with pytest.raises(RunFolderError, match="is not valid JSON"):
        paths.read_json(paths.evaluator_lock)
    with pytest.raises(RunFolderError, match=r"recipe\.yaml is missing"):
        paths.read_json(paths.recipe)


def test_one_driver_at_a_time_and_readers_only_probe(tmp_path: Path) -> None:
    paths = _run_folder(tmp_path / "run")
    assert not is_live(paths)
    lock = RunLock(paths).acquire()
    try:
        assert is_live(paths)
        assert paths.lockfile.read_text().strip().isdigit()  # the driver's pid
        with pytest.raises(RunFolderError, match="already being driven by another process"):
            RunLock(paths).acquire(wait_s=0.0)
        # a live run is never mounted by a privileged sandbox, its scratch aside
        assert protected_folders()[str(paths.root.resolve())] == str(paths.work.resolve())
    finally:
        lock.release()
    assert not is_live(paths)
    RunLock(paths).acquire(wait_s=0.0).release()  # free again
