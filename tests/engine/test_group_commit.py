"""Group commit: the engine fsyncs events in groups, and always before anything acts on them."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rsiframe.archive import log as archive_mod
from rsiframe.archive.log import EVENTS, Archive
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


@pytest.mark.parametrize("k", [1, 3])
def test_events_are_durable_before_anything_acts_on_them(
    mini: Mini, monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    """An operator call, a trial of an evaluation and the run's end come only after the
    events they follow are fsynced; and there are far fewer fsyncs than events."""
    out = mini.run_dir()
    events = out / EVENTS
    durable = [0]  # bytes of events.jsonl known to be on disk
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        durable.append(os.fstat(fd).st_size)

    monkeypatch.setattr(archive_mod.os, "fsync", fsync)
    writer = threading.get_ident()
    problems: list[str] = []

    def check(what: str, cid: str, types: tuple[str, ...] | None) -> None:
        rows = _ends(events)
        if types is None:  # the writer itself acts: everything it appended is durable
            need = rows[-1][0] if rows else 0
        else:  # a worker acts: the event that started its work is durable
            need = max(
                (end for end, e in rows if e["type"] in types and e["data"].get("id") == cid),
                default=0,
            )
        if need > max(durable):
            problems.append(f"{what} of {cid} ran before its events were on disk")

    real_call = OperatorCalls.call

    def call(self: OperatorCalls, cid: str, slot: str, fn: Callable[[], Any]) -> Any:
        def checked() -> Any:
            on_writer = threading.get_ident() == writer
            check(slot, cid, None if on_writer else ("candidate_proposed",))
            return fn()

        return real_call(self, cid, slot, checked)

    real_trial = LocalEngine._trial

    def trial(self: LocalEngine, candidate_dir: Path, *args: Any) -> Any:
        check("a trial", candidate_dir.name, ("evaluation_started",))
        return real_trial(self, candidate_dir, *args)

    monkeypatch.setattr(OperatorCalls, "call", call)
    monkeypatch.setattr(LocalEngine, "_trial", trial)
    engine = Engine.create(mini.recipe, [f"concurrency.candidates={k}"], out)
    try:
        assert engine.drive() == "finished"
        assert max(durable) == events.stat().st_size  # the end is durable before it returns
    finally:
        engine.close()
    assert not problems, problems
    n_events = len(_ends(events))
    assert len(durable) - 1 < 0.75 * n_events, (len(durable) - 1, n_events)
