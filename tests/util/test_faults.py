"""rsiframe.util.faults: SIGKILL and torn appends at named points, in a real child process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rsiframe.archive.log import (
    EVENTS,
    Archive,
    read_events,
)
from rsiframe.util.faults import times_reached
from tests.support.eventlog import SIGNER, sign_with

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
    arc = Archive(tmp_path, loaded.events[-1], sign=sign_with(SIGNER))
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


@pytest.mark.parametrize("fault", ["kill:after:boom:3", "torn:boom:2"])
def test_an_unfired_fault_says_how_often_its_point_was_reached(tmp_path: Path, fault: str) -> None:
    proc = _run_child(tmp_path, fault)
    assert proc.returncode == 0, proc.stderr
    assert times_reached(proc.stderr.decode()) == 1
    assert f"rsiframe fault: {fault} never fired" in proc.stderr.decode()


def test_a_fired_or_absent_fault_says_nothing_at_exit(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RSIFRAME_FAULT"}
    quiet = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path)], env=env, capture_output=True, timeout=60
    )
    assert quiet.returncode == 0 and times_reached(quiet.stderr.decode()) is None
    (tmp_path / "again").mkdir()
    fired = _run_child(tmp_path / "again", "kill:after:boom")
    assert fired.returncode == -signal.SIGKILL
    assert times_reached(fired.stderr.decode()) is None
