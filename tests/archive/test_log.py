"""rsiframe.archive.log: the hash-chained event log, torn-tail repair and content-addressed
artifacts."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from rsiframe.archive.log import (
    EVENTS,
    GENESIS,
    Archive,
    artifact_path,
    get_artifact,
    get_json,
    put_artifact,
    read_events,
    write_atomic,
)
from rsiframe.errors import ArchiveCorrupt
from rsiframe.util.digest import canonical_json, sha256_bytes
from tests.support.eventlog import SIGNER, event_lines, fill, sign_with, write_event_lines

# -- the chain -----------------------------------------------------------------------------


def test_events_read_back_with_seq_and_chain(tmp_path: Path) -> None:
    arc = fill(tmp_path, 5)
    arc.close()
    loaded = read_events(tmp_path)
    assert loaded.torn == b""
    evs = loaded.events
    assert [e.seq for e in evs] == [0, 1, 2, 3, 4]
    assert [e.type for e in evs] == [f"type{i}" for i in range(5)]
    assert [e.data["i"] for e in evs] == list(range(5))
    assert evs[0].prev == GENESIS
    for before, after in itertools.pairwise(evs):
        assert after.prev == before.hash
    # each hash is the sha256 of the line exactly as stored
    assert [e.hash for e in evs] == [sha256_bytes(line) for line in event_lines(tmp_path)]
    assert len({e.hash for e in evs}) == 5


def test_append_returns_the_stored_event(tmp_path: Path) -> None:
    arc = Archive(tmp_path, None, sign=sign_with(SIGNER))
    ev = arc.append("hello", {"a": [1, 2], "b": "ü"})
    arc.close()
    [stored] = read_events(tmp_path).events
    assert stored == ev
    line = json.loads(event_lines(tmp_path)[0])
    expected = {"seq": 0, "ts": ev.ts, "type": "hello", "data": ev.data, "prev": GENESIS}
    assert line == {**expected, "sig": ev.sig}
    assert ev.signed_bytes() == canonical_json(expected)
    assert ev.data == {"a": [1, 2], "b": "ü"}


def test_every_append_is_visible_at_once(tmp_path: Path) -> None:
    seen: list = []
    arc = Archive(tmp_path, None, sign=sign_with(SIGNER), on_append=seen.append)
    for i in range(4):
        ev = arc.append("tick", {"i": i})
        # a fresh reader sees the event without the writer being closed or flushed
        fresh = read_events(tmp_path)
        assert len(fresh.events) == i + 1
        assert fresh.events[-1].hash == ev.hash
        assert fresh.torn == b""
    assert [e.data["i"] for e in seen] == [0, 1, 2, 3]
    arc.close()


def test_reopened_archive_continues_the_chain(tmp_path: Path) -> None:
    fill(tmp_path, 3).close()
    last = read_events(tmp_path).events[-1]
    arc = Archive(tmp_path, last, sign=sign_with(SIGNER))
    ev = arc.append("more", {})
    arc.close()
    assert ev.seq == 3 and ev.prev == last.hash
    assert len(read_events(tmp_path).events) == 4


def test_missing_events_file(tmp_path: Path) -> None:
    with pytest.raises(ArchiveCorrupt, match=r"no events\.jsonl"):
        read_events(tmp_path)


def test_edited_middle_event_is_named(tmp_path: Path) -> None:
    fill(tmp_path, 5).close()
    lines = event_lines(tmp_path)
    obj = json.loads(lines[2])
    obj["data"]["text"] = "rewritten history"
    lines[2] = canonical_json(obj)
    write_event_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt) as info:
        read_events(tmp_path)
    msg = str(info.value)
    assert "event 2 (type2) was changed or removed" in msg
    assert "event 3" in msg  # where the break was found


def test_edited_event_with_recomputed_hashes_breaks_at_first_event(tmp_path: Path) -> None:
    """Rewriting the first event changes every later link."""
    fill(tmp_path, 3).close()
    lines = event_lines(tmp_path)
    obj = json.loads(lines[0])
    obj["data"]["i"] = 99
    lines[0] = canonical_json(obj)
    write_event_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="event 0"):
        read_events(tmp_path)


def test_deleted_middle_line(tmp_path: Path) -> None:
    fill(tmp_path, 5).close()
    lines = event_lines(tmp_path)
    del lines[2]
    write_event_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="event 2"):
        read_events(tmp_path)


def test_deleted_line_with_renumbered_seq_still_breaks_the_chain(tmp_path: Path) -> None:
    fill(tmp_path, 4).close()
    lines = event_lines(tmp_path)
    del lines[1]
    for i in range(1, len(lines)):  # renumber so seq is consistent again
        obj = json.loads(lines[i])
        obj["seq"] = i
        lines[i] = canonical_json(obj)
    write_event_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="hash chain broken"):
        read_events(tmp_path)


def test_swapped_lines(tmp_path: Path) -> None:
    fill(tmp_path, 4).close()
    lines = event_lines(tmp_path)
    lines[1], lines[2] = lines[2], lines[1]
    write_event_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="event 1"):
        read_events(tmp_path)


def test_unreadable_line(tmp_path: Path) -> None:
    fill(tmp_path, 3).close()
    lines = event_lines(tmp_path)
    lines[1] = b"{not json"
    write_event_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="unreadable event"):
        read_events(tmp_path)
    lines[1] = b'{"seq": 1}'
    write_event_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="unreadable event"):
        read_events(tmp_path)


def test_torn_last_line_is_reported_and_repaired(tmp_path: Path) -> None:
    fill(tmp_path, 3).close()
    torn = b'{"seq":3,"ts":1.0,"type":"half'
    with (tmp_path / EVENTS).open("ab") as f:
        f.write(torn)
    loaded = read_events(tmp_path)
    assert loaded.torn == torn
    assert len(loaded.events) == 3

    msg = Archive.repair_torn(tmp_path, loaded.torn)
    assert msg is not None and "events.torn-1" in msg
    assert (tmp_path / "events.torn-1").read_bytes() == torn
    assert (tmp_path / EVENTS).read_bytes().endswith(b"\n")
    again = read_events(tmp_path)
    assert again.torn == b""
    assert again.events == loaded.events

    arc = Archive(tmp_path, again.events[-1], sign=sign_with(SIGNER))
    ev = arc.append("after-repair", {})
    arc.close()
    final = read_events(tmp_path)
    assert [e.seq for e in final.events] == [0, 1, 2, 3]
    assert final.events[-1] == ev
    assert ev.prev == again.events[-1].hash


def test_second_repair_does_not_overwrite_the_first(tmp_path: Path) -> None:
    fill(tmp_path, 1).close()
    for n, torn in enumerate((b"first torn", b"second torn"), start=1):
        with (tmp_path / EVENTS).open("ab") as f:
            f.write(torn)
        Archive.repair_torn(tmp_path, read_events(tmp_path).torn)
        assert (tmp_path / f"events.torn-{n}").read_bytes() == torn
    assert (tmp_path / "events.torn-1").read_bytes() == b"first torn"
    assert Archive.repair_torn(tmp_path, b"") is None
    assert len(read_events(tmp_path).events) == 1


def test_write_atomic(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(os.listdir(tmp_path)) == ["f.json"]  # no temp file left behind


# -- artifacts -----------------------------------------------------------------------------


def test_artifact_round_trip(tmp_path: Path) -> None:
    data = b"trajectory \x00\xff bytes"
    digest = put_artifact(tmp_path, data)
    assert digest == "sha256:" + sha256_bytes(data)
    assert get_artifact(tmp_path, digest) == data
    hexd = digest.split(":")[1]
    assert artifact_path(tmp_path, digest) == (
        tmp_path / "artifacts" / "sha256" / hexd[:2] / hexd[2:]
    )
    assert put_artifact(tmp_path, data) == digest  # same content, same name
    assert put_artifact(tmp_path, data + b"!") != digest
    files = [p for p in (tmp_path / "artifacts").rglob("*") if p.is_file()]
    assert len(files) == 2


def test_archive_put_json(tmp_path: Path) -> None:
    arc = Archive(tmp_path, None, sign=sign_with(SIGNER))
    d1 = arc.put_json({"b": 1, "a": [1, 2]})
    d2 = arc.put_json({"a": [1, 2], "b": 1})  # canonical: key order does not matter
    arc.close()
    assert d1 == d2
    assert get_json(tmp_path, d1) == {"a": [1, 2], "b": 1}
    assert get_artifact(tmp_path, d1) == canonical_json({"a": [1, 2], "b": 1})


def test_modified_artifact_is_corrupt(tmp_path: Path) -> None:
    digest = put_artifact(tmp_path, b"original")
    path = artifact_path(tmp_path, digest)
    path.write_bytes(b"tampered")
    with pytest.raises(ArchiveCorrupt, match="does not match its hash"):
        get_artifact(tmp_path, digest)


def test_missing_artifact_is_corrupt(tmp_path: Path) -> None:
    with pytest.raises(ArchiveCorrupt, match="missing"):
        get_artifact(tmp_path, "sha256:" + "ab" * 32)


@pytest.mark.parametrize(
    "digest",
    ["md5:" + "a" * 64, "sha256:abc", "sha256:" + "a" * 65, "a" * 64, "", "sha256:"],
)
def test_malformed_digest(tmp_path: Path, digest: str) -> None:
    with pytest.raises(ArchiveCorrupt, match="malformed"):
        get_artifact(tmp_path, digest)


def test_non_hex_digest_cannot_name_a_path_outside_the_store(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    # 64 characters, but a path: artifacts/sha256/../../../secret...
    digest = "sha256:" + ("../../../secret").ljust(64, "x")
    assert len(digest.split(":")[1]) == 64
    with pytest.raises(ArchiveCorrupt, match="malformed"):
        artifact_path(run, digest)
