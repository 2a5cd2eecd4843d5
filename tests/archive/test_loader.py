"""rsiframe.archive.loader: a run read back, every event's signature checked (the newest
by default, each one for verify)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsiframe.archive.loader import load_run, unsigned_events
from rsiframe.archive.log import (
    Archive,
    read_events,
)
from rsiframe.certs.signing import EVENT_TYPE, PAYLOAD_TYPE, Signer, create_signer
from rsiframe.errors import ArchiveCorrupt
from rsiframe.util.digest import canonical_json, sha256_bytes
from tests.support.eventlog import SIGNER, event_lines, fill, sign_with, write_event_lines

RUN_ID = "run-test"


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
    for ev, line in zip(events, event_lines(tmp_path), strict=True):
        assert ev.sig == json.loads(line)["sig"]
        assert signer.public.check_bytes(EVENT_TYPE, ev.signed_bytes(), ev.sig)
        assert b'"sig"' not in ev.signed_bytes()
    assert unsigned_events(events, signer.public, every=True) == []
    assert unsigned_events(events, signer.public, every=False) == []


def test_edited_last_event_is_caught_by_its_signature(tmp_path: Path, signer: Signer) -> None:
    fill(tmp_path, 4, signer).close()
    lines = event_lines(tmp_path)
    lines[-1] = _edit(lines[-1], text="edited")
    write_event_lines(tmp_path, lines)
    events = read_events(tmp_path).events  # the chain alone cannot tell
    assert len(events) == 4
    assert unsigned_events(events, signer.public, every=False) == [
        "event 3 (type3) is not signed by the run's key"
    ]


def test_forged_event_with_correct_prev_is_caught(tmp_path: Path, signer: Signer) -> None:
    fill(tmp_path, 3, signer).close()
    last = read_events(tmp_path).events[-1]
    forged = {"seq": 3, "ts": last.ts + 1, "type": "admitted", "data": {}, "prev": last.hash}
    for sig in (None, last.sig, sign_with(SIGNER)(canonical_json(forged))):
        line = canonical_json({**forged, "sig": sig} if sig is not None else forged)
        write_event_lines(tmp_path, [*event_lines(tmp_path)[:3], line])
        events = read_events(tmp_path).events
        assert len(events) == 4  # the chain accepts it
        assert unsigned_events(events, signer.public, every=False) == [
            "event 3 (admitted) is not signed by the run's key"
        ]


def test_rewritten_history_is_caught_by_the_newest_signature(
    tmp_path: Path, signer: Signer
) -> None:
    """Edit event 1 and re-link every later line: the chain is whole, the signatures are not."""
    fill(tmp_path, 5, signer).close()
    lines = event_lines(tmp_path)
    lines[1] = _edit(lines[1], text="rewritten")
    for i in range(2, len(lines)):
        lines[i] = _edit(lines[i], prev=sha256_bytes(lines[i - 1]))
    write_event_lines(tmp_path, lines)
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
    arc = Archive(tmp_path, None, sign=sign_with(signer, PAYLOAD_TYPE))
    arc.append("x", {})
    arc.close()
    events = read_events(tmp_path).events
    assert unsigned_events(events, signer.public, every=True) == [
        "event 0 (x) is not signed by the run's key"
    ]


def test_signature_by_another_key_does_not_count(tmp_path: Path, signer: Signer) -> None:
    fill(tmp_path, 2, SIGNER).close()
    events = read_events(tmp_path).events
    assert len(unsigned_events(events, signer.public, every=True)) == 2
    assert unsigned_events(events, SIGNER.public, every=True) == []


def _run_folder(root: Path, signer: Signer) -> Archive:
    """The smallest run folder load_run accepts: key, recipe lock and a run_started event."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pubkey.pem").write_bytes(signer.public.pem())
    (root / "recipe.lock.json").write_text("{}\n")
    arc = Archive(root, None, sign=sign_with(signer))
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

    lines = event_lines(run)
    lines[-1] = _edit(lines[-1], ts=json.loads(lines[-1])["ts"] + 60)
    write_event_lines(run, lines)
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
    bad_line = canonical_json({**bad, "sig": sign_with(SIGNER)(canonical_json(bad))})
    good = {**bad, "seq": 3, "ts": 2.0, "prev": sha256_bytes(bad_line)}
    good_line = canonical_json({**good, "sig": sign_with(signer)(canonical_json(good))})
    write_event_lines(run, [*event_lines(run), bad_line, good_line])
    assert load_run(run).state.problems == []
    strict_all = load_run(run, strict=False, every_signature=True)
    assert strict_all.state.problems[:1] == [
        "event 2 (session_started) is not signed by the run's key"
    ]
    with pytest.raises(ArchiveCorrupt, match="event 2"):
        load_run(run, every_signature=True)
