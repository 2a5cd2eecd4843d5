"""Open an existing run folder read-only: chain-checked events, signed head, folded state."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from rsiframe.archive import HEAD, Event, read_events
from rsiframe.errors import ArchiveCorrupt, RunFolderError
from rsiframe.runfolder import RunPaths, is_live
from rsiframe.signing import BadSignature, RecordVerifier
from rsiframe.state import RunState, fold

HEAD_TYPE = "https://rsiframe.dev/archive-head/v1"


def head_statement(run_id: str, seq: int, hash_: str) -> dict[str, object]:
    return {"_type": HEAD_TYPE, "run_id": run_id, "seq": seq, "hash": hash_}


@dataclass
class LoadedRun:
    paths: RunPaths
    verifier: RecordVerifier
    events: list[Event]
    state: RunState
    torn: bytes
    notes: list[str] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return is_live(self.paths)

    def run_state(self) -> str:
        """running | finished | interrupted | budget_exhausted | failed."""
        if self.state.terminal is not None:
            return str(self.state.terminal["state"])
        return "running" if self.live else "interrupted"


def check_head(
    paths: RunPaths, verifier: RecordVerifier, events: list[Event], run_id: str
) -> list[str]:
    """Problems with the signed head pointer (empty when it agrees with the chain)."""
    path = paths.root / HEAD
    if not path.exists():
        return ["head.json is missing"] if events else []
    try:
        st = verifier.open(json.loads(path.read_text()))
    except (BadSignature, ValueError) as exc:
        return [f"head.json does not verify: {exc}"]
    if st.get("_type") != HEAD_TYPE or st.get("run_id") != run_id:
        return ["head.json belongs to another run"]
    seq = st.get("seq")
    n = len(events)
    if not isinstance(seq, int) or seq < 0:
        return ["head.json is malformed"]
    if seq == n:  # the head was written, the event was not (a crash in between)
        return []
    if seq > n:
        return [
            f"head.json names event {seq}, but the archive has {n} events (events were removed)"
        ]
    if events[seq].hash != st.get("hash"):
        return [f"event {seq} ({events[seq].type}) differs from the signed head"]
    if seq < n - 1:
        return [f"{n - 1 - seq} event(s) after event {seq} were not written by the runtime"]
    return []


def load_run(root: Path) -> LoadedRun:
    """Read a run folder without writing anything into it."""
    paths = RunPaths(Path(root).resolve()).check()
    try:
        verifier = RecordVerifier.from_pem(paths.pubkey.read_bytes())
    except (BadSignature, ValueError) as exc:
        raise RunFolderError(f"pubkey.pem is unreadable: {exc}", where=str(paths.root)) from exc
    loaded = read_events(paths.root)
    if not loaded.events or loaded.events[0].type != "run_started":
        raise ArchiveCorrupt("the archive does not begin with run_started", where=str(paths.events))
    state = fold(loaded.events, verifier)
    notes = []
    if loaded.torn:
        notes.append(f"archive: the last event is torn ({len(loaded.torn)} bytes); resume drops it")
    head_problems = check_head(paths, verifier, loaded.events, state.run_id)
    state.problems.extend(head_problems)
    return LoadedRun(paths, verifier, loaded.events, state, loaded.torn, notes)
