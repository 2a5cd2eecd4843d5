"""rsiframe.engine.runstart: a new run folder (keys, locks, the seed commit) made only after
every check passed, and an existing one re-checked against its locks without being touched
when a check fails. The mini project, no evaluation and no engine loop."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsiframe.archive import events as E
from rsiframe.archive.runfolder import RunPaths
from rsiframe.certs.signing import EVENT_TYPE
from rsiframe.engine.hooks import Lifecycle
from rsiframe.engine.runstart import RunParts, create_run, open_run
from rsiframe.errors import (
    ArchiveCorrupt,
    LockMismatch,
    RecipeError,
    RunFolderError,
    TaskSetChanged,
)
from rsiframe.repo.candidates import CANDIDATE_REFS
from rsiframe.util.digest import sha256_bytes
from tests.support.mini import Mini


def close(parts: RunParts) -> None:
    """What the engine's close releases (no snapshot, no run)."""
    parts.evaluator.close()
    parts.archive.close()
    parts.repo.close()
    parts.lock.release()


@pytest.fixture
def created(mini: Mini) -> Iterator[tuple[RunParts, E.RunStarted]]:
    parts, started = create_run(mini.recipe, None, mini.run_dir())
    try:
        yield parts, started
    finally:
        close(parts)


@pytest.fixture
def begun(mini: Mini) -> Path:
    """A run folder whose archive holds run_started and session_started, closed."""
    parts, started = create_run(mini.recipe, None, mini.run_dir())
    parts.archive.append(started.type, E.payload(started))
    parts.archive.append("session_started", E.payload(E.SessionStarted()))
    close(parts)
    return mini.run_dir()


def test_create_run_writes_keys_locks_and_the_seed_commit_and_no_event(
    created: tuple[RunParts, E.RunStarted], mini: Mini
) -> None:
    parts, started = created
    paths = parts.paths
    assert paths.root == mini.run_dir().resolve()
    lock = json.loads(paths.recipe_lock.read_text())
    assert lock["digest"] == started.recipe_digest == parts.resolved.digest
    assert set(lock["operators"]) >= {"select", "mutate", "gate"}
    tasks = json.loads(paths.tasks_lock.read_text())
    assert parts.task_lock.fingerprint == started.taskset_fingerprint
    assert sorted(tasks["split"]["sealed"]) == ["t10", "t9"]
    evaluator = json.loads(paths.evaluator_lock.read_text())
    assert evaluator["fingerprint"] == started.evaluator_fingerprint
    assert paths.pubkey.read_bytes() == parts.signer.public.pem()
    assert started.keyid == parts.signer.keyid and started.isolation == parts.evaluator.isolation
    # the seed is the first candidate's commit; nothing is recorded until the engine emits
    assert parts.repo.ref_target(f"{CANDIDATE_REFS}/c0000") == started.seed_commit
    assert parts.repo.tree_of(started.seed_commit) == started.seed_tree
    assert (paths.root / "events.jsonl").read_bytes() == b""
    assert parts.state.candidates == {}


def test_the_archive_it_opens_signs_with_the_runs_key_and_notifies_the_hooks(
    created: tuple[RunParts, E.RunStarted],
) -> None:
    parts, started = created
    seen: list[str] = []
    parts.hooks.add_hook(Lifecycle.EVENT_WRITTEN, lambda n: seen.append(n.event.type))
    ev = parts.archive.append(started.type, E.payload(started))
    assert seen == ["run_started"]
    assert ev.sig and parts.signer.public.check_bytes(EVENT_TYPE, ev.signed_bytes(), ev.sig)


def test_bad_input_creates_nothing(mini: Mini) -> None:
    out = mini.run_dir()
    with pytest.raises(RecipeError, match=r"budget\.max_generations"):
        create_run(mini.recipe, ["budget.max_generations=lots"], out)
    assert not out.exists()


def test_a_folder_that_is_not_empty_is_refused(mini: Mini) -> None:
    out = mini.run_dir()
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    with pytest.raises(RunFolderError, match="output folder exists and is not empty"):
        create_run(mini.recipe, None, out)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_open_run_reopens_the_run_it_began(begun: Path) -> None:
    parts, notes = open_run(begun)
    try:
        assert notes == []
        assert parts.state.run_id and parts.state.session_start is not None
        assert parts.signer.keyid == parts.state.verifier.keyid
    finally:
        close(parts)


def _refused(root: Path, error: type[Exception], match: str) -> None:
    """open_run refuses with ``error`` and leaves the archive byte for byte as it was."""
    before = sha256_bytes((root / "events.jsonl").read_bytes())
    with pytest.raises(error, match=match):
        open_run(root)
    assert sha256_bytes((root / "events.jsonl").read_bytes()) == before


def test_open_run_refuses_an_edited_recipe(begun: Path) -> None:
    recipe = RunPaths(begun).recipe
    recipe.write_text(recipe.read_text().replace("max_changes: 1", "max_changes: 2"))
    _refused(begun, LockMismatch, r"the recipe changed since the run began: .*max_changes")


def test_open_run_refuses_an_edited_task(begun: Path, mini: Mini) -> None:
    (mini.tasks / "t4" / "tests" / "need.txt").write_text("0\n")
    _refused(begun, TaskSetChanged, "t4")


def test_open_run_refuses_an_edited_lock(begun: Path) -> None:
    lock = RunPaths(begun).tasks_lock
    data = json.loads(lock.read_text())
    data["split"]["gate"], data["split"]["sealed"] = data["split"]["sealed"], data["split"]["gate"]
    lock.write_text(json.dumps(data))
    _refused(begun, TaskSetChanged, "task lock's fingerprint does not match its contents")


def test_open_run_refuses_an_archive_that_does_not_verify(begun: Path) -> None:
    events = begun / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    events.write_bytes(lines[0].replace(b'"name":"mini"', b'"name":"evil"') + lines[1])
    _refused(begun, ArchiveCorrupt, r"hash chain broken: event 0 \(run_started\) was changed")
