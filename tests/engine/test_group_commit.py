"""Group commit: the engine fsyncs events in groups, and always before anything acts on them."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rsiframe.archive import log as archive_mod
from rsiframe.archive.log import EVENTS, Archive
from rsiframe.engine import inflight as inflight_mod
from rsiframe.engine.loop import Engine
from rsiframe.evaluators.local import LocalEngine
from rsiframe.slots.calls import OperatorCalls
from tests.support.mini import Mini


def test_the_archive_fsyncs_every_append_unless_the_writer_groups_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(archive_mod.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    a = Archive(tmp_path, None, sign=lambda b: "sig")
    a.append("one", {})
    assert len(synced) == 1  # by default every append is durable when it returns
    a.group_commit = True
    for i in range(3):
        a.append("more", {"i": i})
    assert len(synced) == 1
    # written to the operating system all the same: a killed process loses none of them
    assert len((tmp_path / EVENTS).read_bytes().splitlines()) == 4
    a.sync()
    a.sync()  # nothing new: no second fsync
    assert len(synced) == 2
    a.append("last", {})
    a.close()  # closing syncs what is left
    assert len(synced) == 3


def _ends(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Every event of the file with the byte offset just after its line."""
    out, at = [], 0
    for line in path.read_bytes().splitlines(keepends=True):
        at += len(line)
        out.append((at, json.loads(line)))
    return out


def test_sync_through_skips_the_fsync_an_earlier_one_covered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(archive_mod.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    a = Archive(tmp_path, None, sign=lambda b: "sig", group_commit=True)
    first = a.append("one", {})
    second = a.append("two", {})
    a.sync_through(first.seq)  # one fsync covers both events
    assert len(synced) == 1 and a.durable_seq == second.seq
    a.append("three", {})
    a.sync_through(second.seq)  # already durable: no fsync for a newer event's sake
    assert len(synced) == 1
    a.close()
    assert len(synced) == 2


def test_a_reopened_archive_makes_what_it_found_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed writer's events may be in the page cache only: the next writer fsyncs them
    once before anything may count them as durable."""
    a = Archive(tmp_path, None, sign=lambda b: "sig", group_commit=True)
    last = a.append("one", {})
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(archive_mod.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    b = Archive(tmp_path, last, sign=lambda b: "sig", group_commit=True)
    assert len(synced) == 1 and b.durable_seq == last.seq
    b.sync_through(last.seq)
    assert len(synced) == 1


@pytest.mark.parametrize("k", [1, 3])
def test_events_are_durable_before_an_effect_depends_on_them(
    mini: Mini, monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    """A gate reads a candidate's scores only once its certificates are fsynced, the sealed
    evaluation and the run's end come only after the events that led to them are; and there
    are at most two fsyncs per candidate (issue 29: sync points only where an effect
    depends on them, shared by the candidates in flight)."""
    out = mini.run_dir()
    events = out / EVENTS
    durable = [0]  # bytes of events.jsonl known to be on disk
    event_syncs = [0]
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        st = os.fstat(fd)
        if events.exists() and st.st_ino == events.stat().st_ino:  # not the run's other files
            durable.append(st.st_size)
            event_syncs[0] += 1

    monkeypatch.setattr(archive_mod.os, "fsync", fsync)
    # the count below is per candidate: no syncs of the writer's waits (a time bound, more
    # of them the slower the machine)
    monkeypatch.setattr(inflight_mod, "SYNC_AGE_S", 3600.0)
    problems: list[str] = []

    def check(what: str, cid: str, types: tuple[str, ...]) -> None:
        rows = _ends(events)
        need = max(
            (end for end, e in rows if e["type"] in types and e["data"].get("id") == cid),
            default=0,
        )
        if need > max(durable):
            problems.append(f"{what} of {cid} ran before its events were on disk")

    real_call = OperatorCalls.call

    def call(self: OperatorCalls, cid: str, slot: str, fn: Callable[[], Any]) -> Any:
        def checked() -> Any:
            if slot == "gate":
                check(slot, cid, ("evaluation_certified",))
            return fn()

        return real_call(self, cid, slot, checked)

    real_trial = LocalEngine._trial

    sealed: set[str] = set()  # the sealed split's task ids, once the run has drawn them

    def trial(self: LocalEngine, candidate_dir: Path, task: Any, *args: Any) -> Any:
        # (the seed's splits run side by side: a trial is sealed by its task, not by the
        # newest evaluation_started)
        if task.id in sealed:
            check("a sealed trial", candidate_dir.name, ("evaluation_started",))
        return real_trial(self, candidate_dir, task, *args)

    monkeypatch.setattr(OperatorCalls, "call", call)
    monkeypatch.setattr(LocalEngine, "_trial", trial)
    engine = Engine.create(mini.recipe, [f"concurrency.candidates={k}"], out)
    sealed.update(engine.task_lock.split["sealed"])
    assert sealed
    try:
        assert engine.drive() == "finished"
        assert max(durable) == events.stat().st_size  # the end is durable before it returns
    finally:
        engine.close()
    assert not problems, problems
    rows = [e for _, e in _ends(events)]
    assert any(e["type"] == "evaluation_started" and e["data"]["split"] == "sealed" for e in rows)
    candidates = sum(e["type"] == "candidate_proposed" for e in rows)
    assert event_syncs[0] <= 2 * candidates, (event_syncs[0], candidates, len(rows))


def test_an_attempt_charged_to_max_task_runs_is_durable_before_its_tasks_run(
    mini: Mini, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``budget.max_task_runs`` an attempt's ``evaluation_started`` is its task-run
    charge: a machine crash that lost it after its tasks ran would leave them uncharged
    (and re-run on resume), so every certified attempt's trials start only once it is on
    disk, as a minibatch's ``tasks_run`` is (found in review: only sealed ones were)."""
    out = mini.run_dir()
    events = out / EVENTS
    durable = [0]
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        st = os.fstat(fd)
        if events.exists() and st.st_ino == events.stat().st_ino:
            durable.append(st.st_size)

    monkeypatch.setattr(archive_mod.os, "fsync", fsync)
    monkeypatch.setattr(inflight_mod, "SYNC_AGE_S", 3600.0)  # no syncs of the writer's waits
    late: list[str] = []
    real_trial = LocalEngine._trial

    split_of: dict[str, str] = {}  # task id -> its split, once the run has drawn them

    def trial(self: LocalEngine, candidate_dir: Path, task: Any, *args: Any) -> Any:
        # the attempt a trial belongs to is its candidate's on the task's split (the seed's
        # splits run side by side, so the newest evaluation_started may be another split's)
        cid, split = candidate_dir.name, split_of[task.id]
        rows = [(end, e) for end, e in _ends(events) if e["data"].get("id") == cid]
        need = max((end for end, e in rows if _started_on(e, split)), default=0)
        if need > max(durable):
            late.append(cid)
        return real_trial(self, candidate_dir, task, *args)

    monkeypatch.setattr(LocalEngine, "_trial", trial)
    engine = Engine.create(mini.recipe, ["budget.max_task_runs=100000"], out)
    split_of.update({t: s for s, ids in engine.task_lock.split.items() for t in ids})
    try:
        assert engine.drive() == "finished"
    finally:
        engine.close()
    assert not late, f"trials of {sorted(set(late))} ran before their charge was on disk"


def _started_on(e: dict[str, Any], split: str) -> bool:
    return e["type"] == "evaluation_started" and e["data"]["split"] == split
