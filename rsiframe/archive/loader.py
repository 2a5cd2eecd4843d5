"""Open an existing run folder read-only: chain-checked, signature-checked, folded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rsiframe.archive.log import Event, read_events
from rsiframe.archive.runfolder import RunPaths, is_live
from rsiframe.archive.snapshot import load_snapshot
from rsiframe.archive.state import RunState
from rsiframe.certs.signing import EVENT_TYPE, BadSignature, RecordVerifier
from rsiframe.errors import ArchiveCorrupt, RunFolderError


def unsigned_events(events: list[Event], verifier: RecordVerifier, *, every: bool) -> list[str]:
    """Events whose signature does not verify: the newest only (it covers the chain) or all."""
    todo = events if every else events[-1:]
    return [
        f"event {ev.seq} ({ev.type}) is not signed by the run's key"
        for ev in todo
        if not (ev.sig and verifier.check_bytes(EVENT_TYPE, ev.signed_bytes(), ev.sig))
    ]


def require_signed(
    events: list[Event], verifier: RecordVerifier, where: str, *, every: bool = False
) -> None:
    """Raise :class:`ArchiveCorrupt` naming the first event of :func:`unsigned_events`."""
    unsigned = unsigned_events(events, verifier, every=every)
    if unsigned:
        raise ArchiveCorrupt(f"{unsigned[0]} (edited or forged)", where=where)


def open_verifier(paths: RunPaths) -> RecordVerifier:
    """The run's public key (``pubkey.pem``), as a verifier."""
    try:
        return RecordVerifier.from_pem(paths.pubkey.read_bytes())
    except (BadSignature, ValueError) as exc:
        raise RunFolderError(f"pubkey.pem is unreadable: {exc}", where=str(paths.root)) from exc


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


def load_run(
    root: Path, *, strict: bool = True, every_signature: bool = False, snapshot: bool = False
) -> LoadedRun:
    """Read a run folder without writing anything into it.

    ``strict`` raises :class:`ArchiveCorrupt` when the newest event's signature
    (with ``every_signature``, any event's) fails; otherwise each failure becomes a
    problem in ``state.problems`` (for the self-test, and for reading a run you expect
    to have been tampered with).

    ``snapshot`` (resume only, never ``verify``) starts from the run's signed state
    snapshot when it verifies and matches the archive (:mod:`rsiframe.archive.snapshot`), and
    checks and folds only the events after it; ``events`` then begins at the
    snapshot's event. The bytes before it are still checked, against the digest the
    snapshot signed (no line parsed, no certificate rechecked). A snapshot that does
    not match is ignored, with a note.
    """
    paths = RunPaths(Path(root).resolve()).check()
    verifier = open_verifier(paths)
    notes = []
    snap, why = load_snapshot(paths.root, verifier) if snapshot else (None, "")
    if snap is not None:
        loaded = read_events(paths.root, after=snap.head, offset=snap.end)
        loaded.events.insert(0, snap.head)
        state = snap.state
    else:
        if why and why != "no snapshot":
            notes.append(f"state snapshot ignored: {why}; folded every event")
        loaded = read_events(paths.root)
        if not loaded.events or loaded.events[0].type != "run_started":
            raise ArchiveCorrupt(
                "the archive does not begin with run_started", where=str(paths.events)
            )
        state = RunState(verifier=verifier)
    folded = loaded.events[1:] if snap is not None else loaded.events
    if strict:
        require_signed(loaded.events, verifier, str(paths.events), every=every_signature)
    for ev in folded:
        state.apply(ev)
    if not strict:
        state.problems[:0] = unsigned_events(loaded.events, verifier, every=every_signature)
    if loaded.torn:
        notes.append(f"archive: the last event is torn ({len(loaded.torn)} bytes); resume drops it")
    return LoadedRun(paths, verifier, loaded.events, state, loaded.torn, notes)
