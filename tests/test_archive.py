"""rsiframe.archive.log and rsiframe.archive.loader: the hash-chained, signed event log and
artifacts."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe.archive.loader import load_run, unsigned_events
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
from rsiframe.certs.signing import EVENT_TYPE, PAYLOAD_TYPE, Signer, create_signer
from rsiframe.errors import ArchiveCorrupt
from rsiframe.util.digest import canonical_json, sha256_bytes

RUN_ID = "run-test"
SIGNER = Signer(Ed25519PrivateKey.generate())


def _sign_with(signer: Signer, payload_type: str = EVENT_TYPE) -> Callable[[bytes], str]:
    return lambda payload: signer.sign_bytes(payload_type, payload)


def _lines(run: Path) -> list[bytes]:
    return (run / EVENTS).read_bytes().split(b"\n")[:-1]


def _write_lines(run: Path, lines: list[bytes]) -> None:
    (run / EVENTS).write_bytes(b"".join(line + b"\n" for line in lines))


def _fill(run: Path, n: int, signer: Signer = SIGNER) -> Archive:
    arc = Archive(run, None, sign=_sign_with(signer))
    for i in range(n):
        arc.append(f"type{i}", {"i": i, "text": f"event {i}"})
    return arc


def _edit(line: bytes, **changes: object) -> bytes:
    obj = json.loads(line)
    for key, value in changes.items():
        if key == "text":
            obj["data"]["text"] = value
        else:
            obj[key] = value
    return canonical_json(obj)


@pytest.fixture
def signer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Signer:
    """A run key created the way the runtime creates it (in a private key folder)."""
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(tmp_path / "keys"))
    return create_signer(RUN_ID)


# -- the chain -----------------------------------------------------------------------------


def test_events_read_back_with_seq_and_chain(tmp_path: Path) -> None:
    arc = _fill(tmp_path, 5)
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
    assert [e.hash for e in evs] == [sha256_bytes(line) for line in _lines(tmp_path)]
    assert len({e.hash for e in evs}) == 5


def test_append_returns_the_stored_event(tmp_path: Path) -> None:
    arc = Archive(tmp_path, None, sign=_sign_with(SIGNER))
    ev = arc.append("hello", {"a": [1, 2], "b": "ü"})
    arc.close()
    [stored] = read_events(tmp_path).events
    assert stored == ev
    line = json.loads(_lines(tmp_path)[0])
    expected = {"seq": 0, "ts": ev.ts, "type": "hello", "data": ev.data, "prev": GENESIS}
    assert line == {**expected, "sig": ev.sig}
    assert ev.signed_bytes() == canonical_json(expected)
    assert ev.data == {"a": [1, 2], "b": "ü"}


def test_every_append_is_visible_at_once(tmp_path: Path) -> None:
    seen: list = []
    arc = Archive(tmp_path, None, sign=_sign_with(SIGNER), on_append=seen.append)
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
    _fill(tmp_path, 3).close()
    last = read_events(tmp_path).events[-1]
    arc = Archive(tmp_path, last, sign=_sign_with(SIGNER))
    ev = arc.append("more", {})
    arc.close()
    assert ev.seq == 3 and ev.prev == last.hash
    assert len(read_events(tmp_path).events) == 4


def test_missing_events_file(tmp_path: Path) -> None:
    with pytest.raises(ArchiveCorrupt, match=r"no events\.jsonl"):
        read_events(tmp_path)


def test_edited_middle_event_is_named(tmp_path: Path) -> None:
    _fill(tmp_path, 5).close()
    lines = _lines(tmp_path)
    obj = json.loads(lines[2])
    obj["data"]["text"] = "rewritten history"
    lines[2] = canonical_json(obj)
    _write_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt) as info:
        read_events(tmp_path)
    msg = str(info.value)
    assert "event 2 (type2) was changed or removed" in msg
    assert "event 3" in msg  # where the break was found


def test_edited_event_with_recomputed_hashes_breaks_at_first_event(tmp_path: Path) -> None:
    """Rewriting the first event changes every later link."""
    _fill(tmp_path, 3).close()
    lines = _lines(tmp_path)
    obj = json.loads(lines[0])
    obj["data"]["i"] = 99
    lines[0] = canonical_json(obj)
    _write_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="event 0"):
        read_events(tmp_path)


def test_deleted_middle_line(tmp_path: Path) -> None:
    _fill(tmp_path, 5).close()
    lines = _lines(tmp_path)
    del lines[2]
    _write_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="event 2"):
        read_events(tmp_path)


def test_deleted_line_with_renumbered_seq_still_breaks_the_chain(tmp_path: Path) -> None:
    _fill(tmp_path, 4).close()
    lines = _lines(tmp_path)
    del lines[1]
    for i in range(1, len(lines)):  # renumber so seq is consistent again
        obj = json.loads(lines[i])
        obj["seq"] = i
        lines[i] = canonical_json(obj)
    _write_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="hash chain broken"):
        read_events(tmp_path)


def test_swapped_lines(tmp_path: Path) -> None:
    _fill(tmp_path, 4).close()
    lines = _lines(tmp_path)
    lines[1], lines[2] = lines[2], lines[1]
    _write_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="event 1"):
        read_events(tmp_path)


def test_unreadable_line(tmp_path: Path) -> None:
    _fill(tmp_path, 3).close()
    lines = _lines(tmp_path)
    lines[1] = b"{not json"
    _write_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="unreadable event"):
        read_events(tmp_path)
    lines[1] = b'{"seq": 1}'
    _write_lines(tmp_path, lines)
    with pytest.raises(ArchiveCorrupt, match="unreadable event"):
        read_events(tmp_path)


def test_torn_last_line_is_reported_and_repaired(tmp_path: Path) -> None:
    _fill(tmp_path, 3).close()
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

    arc = Archive(tmp_path, again.events[-1], sign=_sign_with(SIGNER))
    ev = arc.append("after-repair", {})
    arc.close()
    final = read_events(tmp_path)
    assert [e.seq for e in final.events] == [0, 1, 2, 3]
    assert final.events[-1] == ev
    assert ev.prev == again.events[-1].hash


def test_second_repair_does_not_overwrite_the_first(tmp_path: Path) -> None:
    _fill(tmp_path, 1).close()
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


# -- signatures ---------------------------------------------------------------------------


def test_every_event_is_signed_over_the_record_without_its_signature(
    tmp_path: Path, signer: Signer
) -> None:
    signed: list[bytes] = []

    def sign(payload: bytes) -> str:
        signed.append(payload)
        return signer.sign_bytes(EVENT_TYPE, payload)

    arc = Archive(tmp_path, None, sign=sign)
    for i in range(3):
        arc.append("step", {"i": i})
    arc.close()
    events = read_events(tmp_path).events
    assert [ev.signed_bytes() for ev in events] == signed
    for ev, line in zip(events, _lines(tmp_path), strict=True):
        assert ev.sig == json.loads(line)["sig"]
        assert signer.public.check_bytes(EVENT_TYPE, ev.signed_bytes(), ev.sig)
        assert b'"sig"' not in ev.signed_bytes()
    assert unsigned_events(events, signer.public, every=True) == []
    assert unsigned_events(events, signer.public, every=False) == []


def test_edited_last_event_is_caught_by_its_signature(tmp_path: Path, signer: Signer) -> None:
    _fill(tmp_path, 4, signer).close()
    lines = _lines(tmp_path)
    lines[-1] = _edit(lines[-1], text="edited")
    _write_lines(tmp_path, lines)
    events = read_events(tmp_path).events  # the chain alone cannot tell
    assert len(events) == 4
    assert unsigned_events(events, signer.public, every=False) == [
        "event 3 (type3) is not signed by the run's key"
    ]


def test_forged_event_with_correct_prev_is_caught(tmp_path: Path, signer: Signer) -> None:
    _fill(tmp_path, 3, signer).close()
    last = read_events(tmp_path).events[-1]
    forged = {"seq": 3, "ts": last.ts + 1, "type": "admitted", "data": {}, "prev": last.hash}
    for sig in (None, last.sig, _sign_with(SIGNER)(canonical_json(forged))):
        line = canonical_json({**forged, "sig": sig} if sig is not None else forged)
        _write_lines(tmp_path, [*_lines(tmp_path)[:3], line])
        events = read_events(tmp_path).events
        assert len(events) == 4  # the chain accepts it
        assert unsigned_events(events, signer.public, every=False) == [
            "event 3 (admitted) is not signed by the run's key"
        ]


def test_rewritten_history_is_caught_by_the_newest_signature(
    tmp_path: Path, signer: Signer
) -> None:
    """Edit event 1 and re-link every later line: the chain is whole, the signatures are not."""
    _fill(tmp_path, 5, signer).close()
    lines = _lines(tmp_path)
    lines[1] = _edit(lines[1], text="rewritten")
    for i in range(2, len(lines)):
        lines[i] = _edit(lines[i], prev=sha256_bytes(lines[i - 1]))
    _write_lines(tmp_path, lines)
    events = read_events(tmp_path).events
    assert len(events) == 5
    assert unsigned_events(events, signer.public, every=False) == [
        "event 4 (type4) is not signed by the run's key"
    ]
    assert [p.split(" (")[0] for p in unsigned_events(events, signer.public, every=True)] == [
        "event 1",
        "event 2",
        "event 3",
        "event 4",
    ]


def test_signature_for_another_payload_type_does_not_count(tmp_path: Path, signer: Signer) -> None:
    # a certificate signature (in-toto payload type) can never pass as an event signature
    arc = Archive(tmp_path, None, sign=_sign_with(signer, PAYLOAD_TYPE))
    arc.append("x", {})
    arc.close()
    events = read_events(tmp_path).events
    assert unsigned_events(events, signer.public, every=True) == [
        "event 0 (x) is not signed by the run's key"
    ]


def test_signature_by_another_key_does_not_count(tmp_path: Path, signer: Signer) -> None:
    _fill(tmp_path, 2, SIGNER).close()
    events = read_events(tmp_path).events
    assert len(unsigned_events(events, signer.public, every=True)) == 2
    assert unsigned_events(events, SIGNER.public, every=True) == []


def _run_folder(root: Path, signer: Signer) -> Archive:
    """The smallest run folder load_run accepts: key, recipe lock and a run_started event."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pubkey.pem").write_bytes(signer.public.pem())
    (root / "recipe.lock.json").write_text("{}\n")
    arc = Archive(root, None, sign=_sign_with(signer))
    arc.append(
        "run_started",
        {
            "run_id": RUN_ID,
            "name": "t",
            "recipe_digest": "r",
            "taskset_fingerprint": "t",
            "evaluator_fingerprint": "e",
            "isolation": "process",
            "seed_commit": "c",
            "seed_tree": "t",
            "keyid": signer.keyid,
        },
    )
    arc.append("session_started", {})
    return arc


def test_load_run_checks_the_newest_signature(tmp_path: Path, signer: Signer) -> None:
    run = tmp_path / "run"
    _run_folder(run, signer).close()
    loaded = load_run(run)
    assert [e.type for e in loaded.events] == ["run_started", "session_started"]
    assert loaded.state.problems == []

    lines = _lines(run)
    lines[-1] = _edit(lines[-1], ts=json.loads(lines[-1])["ts"] + 60)
    _write_lines(run, lines)
    with pytest.raises(ArchiveCorrupt, match="event 1 \\(session_started\\) is not signed"):
        load_run(run)
    lenient = load_run(run, strict=False)
    assert lenient.state.problems[0] == "event 1 (session_started) is not signed by the run's key"


def test_load_run_every_signature(tmp_path: Path, signer: Signer) -> None:
    """A valid newest signature over a chain is enough by default; verify checks each one."""
    run = tmp_path / "run"
    arc = _run_folder(run, signer)
    arc.close()
    # an event signed by another key, then a good one on top (built by hand)
    events = read_events(run).events
    bad = {"seq": 2, "ts": 1.0, "type": "session_started", "data": {}, "prev": events[-1].hash}
    bad_line = canonical_json({**bad, "sig": _sign_with(SIGNER)(canonical_json(bad))})
    good = {**bad, "seq": 3, "ts": 2.0, "prev": sha256_bytes(bad_line)}
    good_line = canonical_json({**good, "sig": _sign_with(signer)(canonical_json(good))})
    _write_lines(run, [*_lines(run), bad_line, good_line])
    assert load_run(run).state.problems == []
    strict_all = load_run(run, strict=False, every_signature=True)
    assert strict_all.state.problems[:1] == [
        "event 2 (session_started) is not signed by the run's key"
    ]
    with pytest.raises(ArchiveCorrupt, match="event 2"):
        load_run(run, every_signature=True)


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
    arc = Archive(tmp_path, None, sign=_sign_with(SIGNER))
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


# -- fault injection -----------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from rsiframe.archive.log import Archive
    from rsiframe.certs.signing import EVENT_TYPE, Signer
    signer = Signer(Ed25519PrivateKey.generate())
    arc = Archive(Path(sys.argv[1]), None, sign=lambda b: signer.sign_bytes(EVENT_TYPE, b))
    arc.append("start", {"n": 0})
    arc.append("boom", {"payload": "x" * 200})
    arc.append("never", {})
    """
)


def _run_child(run: Path, fault: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "RSIFRAME_FAULT": fault}
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(run)], env=env, capture_output=True, timeout=60
    )


def test_fault_torn_append_dies_with_half_a_line(tmp_path: Path) -> None:
    proc = _run_child(tmp_path, "torn:boom")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    raw = (tmp_path / EVENTS).read_bytes()
    assert not raw.endswith(b"\n")
    loaded = read_events(tmp_path)
    assert [e.type for e in loaded.events] == ["start"]
    assert loaded.torn
    assert loaded.torn.startswith(b'{"data":{"payload":"xxx')  # half of the boom event
    with pytest.raises(ValueError):
        json.loads(loaded.torn)
    # and the run can be repaired and continued
    Archive.repair_torn(tmp_path, loaded.torn)
    arc = Archive(tmp_path, loaded.events[-1], sign=_sign_with(SIGNER))
    arc.append("resumed", {})
    arc.close()
    assert [e.type for e in read_events(tmp_path).events] == ["start", "resumed"]


def test_fault_kill_after_event_leaves_a_complete_line(tmp_path: Path) -> None:
    proc = _run_child(tmp_path, "kill:after:boom")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert (tmp_path / EVENTS).read_bytes().endswith(b"\n")
    loaded = read_events(tmp_path)
    assert [e.type for e in loaded.events] == ["start", "boom"]
    assert loaded.events[1].data == {"payload": "x" * 200}
    assert loaded.torn == b""


def test_fault_on_the_nth_occurrence(tmp_path: Path) -> None:
    child = _CHILD.replace('arc.append("never", {})', 'arc.append("boom", {"second": True})')
    env = {**os.environ, "RSIFRAME_FAULT": "kill:after:boom:2"}
    proc = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path)], env=env, capture_output=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert [e.type for e in read_events(tmp_path).events] == ["start", "boom", "boom"]


def test_no_fault_runs_to_completion(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RSIFRAME_FAULT"}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path)], env=env, capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert [e.type for e in read_events(tmp_path).events] == ["start", "boom", "never"]
