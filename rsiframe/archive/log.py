"""The run's append-only, tamper-evident archive: hash-chained events and artifacts.

``events.jsonl`` holds one JSON event per line; each carries the sha256 of the
previous line and an Ed25519 signature by the run's key. Each append is written to
the operating system before the call returns, so a killed process never loses an
event; it is fsynced at once too, unless the writer turned on :attr:`Archive.group_commit`:
then :meth:`Archive.sync` fsyncs everything appended so far in one call, and the writer
calls it (or :meth:`Archive.sync_through`, which skips the fsync when an earlier one
already covered the event) where an effect outside the run depends on its events (the
engine: a candidate's certificates before its gate reads their scores, the sealed
evaluation, a task run it charges, a session's end; events older than a second while it
waits). A machine crash can lose only a tail of the chain, never an event in the middle,
and never one such an effect depends on. Because every event commits to all before
it, the newest event's signature authenticates the whole chain: an edited,
inserted or appended line is detected with the public key alone.

Artifacts (trajectories, logs, analyses) are content-addressed files under
``artifacts/sha256/``, written atomically (temp file, rename) but not fsynced
one by one: a machine crash can lose the newest evidence files, which
``verify`` then reports as missing; it cannot lose or alter an event.

A torn last line (a crash in the middle of an append) is detected and, when
the archive is opened for writing, moved aside; any other break stops
everything and names the event.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe.errors import ArchiveCorrupt
from rsiframe.util import faults
from rsiframe.util.digest import canonical_json, sha256_bytes

GENESIS = "0" * 64
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
EVENTS = "events.jsonl"


@dataclass(frozen=True)
class Event:
    seq: int
    type: str
    data: dict[str, Any]
    ts: float
    prev: str
    hash: str
    sig: str | None = None

    def signed_bytes(self) -> bytes:
        """What the event's signature covers: the event without its signature."""
        return canonical_json(
            {
                "seq": self.seq,
                "ts": self.ts,
                "type": self.type,
                "data": self.data,
                "prev": self.prev,
            }
        )


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` all or nothing: temp file, (fsync,) rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("wb") as f:
        f.write(data)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass
class LoadResult:
    events: list[Event]
    torn: bytes  # the bytes of a torn last line, if any


def parse_line(line: bytes, where: str) -> Event:
    """One line of ``events.jsonl`` as an :class:`Event` (not yet checked against the chain)."""
    try:
        obj = json.loads(line)
        return Event(
            seq=obj["seq"],
            type=obj["type"],
            data=obj["data"],
            ts=obj["ts"],
            prev=obj["prev"],
            hash=sha256_bytes(line),
            sig=obj.get("sig"),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ArchiveCorrupt(f"unreadable event ({exc})", where=where) from exc


def chain_head(events: list[Event]) -> str:
    """``N:HASH``: how many events the chain holds and the hash of the last one. Written
    down (or published), it lets ``verify --head`` prove later that nothing was cut off."""
    # from the last event's index, so a list that begins at a snapshot's event counts right
    return f"{events[-1].seq + 1}:{events[-1].hash}" if events else f"0:{GENESIS}"


def read_events(run_dir: Path, after: Event | None = None, offset: int = 0) -> LoadResult:
    """Parse and chain-check every event. Raises :class:`ArchiveCorrupt` on a broken link.

    With ``after`` (an event already trusted, e.g. a snapshot's) read only the events
    from byte ``offset`` on, which must chain from it.
    """
    path = run_dir / EVENTS
    try:
        with path.open("rb") as f:
            f.seek(offset)
            raw = f.read()
    except FileNotFoundError as exc:
        raise ArchiveCorrupt("archive has no events.jsonl", where=str(run_dir)) from exc
    lines = raw.split(b"\n")
    torn = lines.pop()  # after the last newline: b"" unless the last write was torn
    events: list[Event] = []
    prev = after.hash if after else GENESIS
    first = after.seq + 1 if after else 0
    for i, line in enumerate(lines, first):
        where = f"{path}: event {i}"
        ev = parse_line(line, where)
        if ev.seq != i:
            raise ArchiveCorrupt(f"sequence number {ev.seq} out of order", where=where)
        if ev.prev != prev:
            name = events[-1].type if events else (after.type if after else "start")
            raise ArchiveCorrupt(
                f"hash chain broken: event {i - 1} ({name}) was changed or removed", where=where
            )
        events.append(ev)
        prev = ev.hash
    return LoadResult(events=events, torn=torn)


class Archive:
    """Writer for one run folder's events and artifacts."""

    def __init__(
        self,
        run_dir: Path,
        last: Event | None,
        sign: Callable[[bytes], str],
        *,
        on_append: Callable[[Event], None] | None = None,
        group_commit: bool = False,
    ) -> None:
        """``on_append``: called with every event once it is written (the engine's hooks);
        ``group_commit``: fsync in :meth:`sync` only (the caller's sync points), not at every
        append."""
        self.run_dir = run_dir
        self._seq = last.seq + 1 if last else 0
        self._prev = last.hash if last else GENESIS
        self._sign = sign
        self._file = (run_dir / EVENTS).open("ab")
        self._on_append = on_append
        self.group_commit = group_commit
        self._unsynced, self._since = 0, 0.0
        if last is not None:  # a killed writer's events may be in the page cache only
            os.fsync(self._file.fileno())
        #: the newest event known to be on disk (-1: none)
        self.durable_seq = self._seq - 1

    @property
    def head(self) -> str:
        """:func:`chain_head` of what this writer has appended so far."""
        return f"{self._seq}:{self._prev}"

    @staticmethod
    def repair_torn(run_dir: Path, torn: bytes) -> str | None:
        """Move a torn last line aside so appends can continue; returns a message."""
        if not torn:
            return None
        path = run_dir / EVENTS
        n = 1
        while (run_dir / f"events.torn-{n}").exists():
            n += 1
        aside = run_dir / f"events.torn-{n}"
        write_atomic(aside, torn)
        size = path.stat().st_size
        with path.open("r+b") as f:
            f.truncate(size - len(torn))
            f.flush()
            os.fsync(f.fileno())
        return f"archive: dropped a torn last event ({len(torn)} bytes, kept in {aside.name})"

    def sync(self, max_age: float = 0.0) -> None:
        """Make every event appended so far durable (one fsync for all of them); with
        ``max_age``, only once the oldest of them has waited that many seconds."""
        if self._unsynced and time.monotonic() - self._since >= max_age:
            os.fsync(self._file.fileno())
            self._unsynced = 0
            self.durable_seq = self._seq - 1

    def sync_through(self, seq: int) -> None:
        """Make the event ``seq`` and all before it durable: no fsync when an earlier one
        (another candidate's sync point, say) already covered it."""
        if seq > self.durable_seq:
            self.sync()

    def close(self) -> None:
        self.sync()
        self._file.close()

    def append(self, type_: str, data: dict[str, Any]) -> Event:
        """Append one event and return it: written to the operating system before it
        returns (a killed process cannot lose it), fsynced too unless ``group_commit``.

        Ctrl-C and SIGTERM are held back until the event and the in-memory state
        agree, so an interrupt can never leave half an append behind. (Masking the
        signal is not enough: the kernel would hand it to another thread, and Python
        would still raise in this one; so the handlers are swapped instead.)
        """
        if threading.current_thread() is not threading.main_thread():
            return self._append_and_notify(type_, data)
        pending: list[int] = []

        def hold(signum: int, frame: object) -> None:
            pending.append(signum)

        previous = {sig: signal.signal(sig, hold) for sig in HELD_SIGNALS}
        try:
            ev = self._append_and_notify(type_, data)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if pending:
                signal.raise_signal(pending[0])
        return ev

    def _append_and_notify(self, type_: str, data: dict[str, Any]) -> Event:
        ev = self._append(type_, data)
        if self._on_append is not None:
            self._on_append(ev)
        faults.reached("after:" + type_)
        return ev

    def _append(self, type_: str, data: dict[str, Any]) -> Event:
        ts = round(time.time(), 6)
        record = {
            "seq": self._seq,
            "ts": ts,
            "type": type_,
            "data": data,
            "prev": self._prev,
        }
        sig = self._sign(canonical_json(record))
        line = canonical_json({**record, "sig": sig})
        digest = sha256_bytes(line)
        if faults.tear(type_):
            self._file.write(line[: len(line) // 2])
            self._file.flush()
            os.fsync(self._file.fileno())
            faults.die()
        self._file.write(line + b"\n")
        self._file.flush()  # in the OS now: a killed process cannot lose it
        if not self._unsynced:
            self._since = time.monotonic()
        self._unsynced += 1
        if not self.group_commit:
            self.sync()
        ev = Event(
            seq=self._seq,
            type=type_,
            data=data,
            ts=ts,
            prev=self._prev,
            hash=digest,
            sig=sig,
        )
        self._seq += 1
        self._prev = ev.hash
        return ev

    # -- artifacts -------------------------------------------------------------

    def put(self, data: bytes) -> str:
        return put_artifact(self.run_dir, data)

    def put_json(self, value: Any) -> str:
        return self.put(canonical_json(value))


def artifact_path(run_dir: Path, digest: str) -> Path:
    algo, _, hexd = digest.partition(":")
    if algo != "sha256" or len(hexd) != 64 or hexd.strip("0123456789abcdef"):
        raise ArchiveCorrupt(f"malformed artifact digest {digest!r}")
    return run_dir / "artifacts" / "sha256" / hexd[:2] / hexd[2:]


def put_artifact(run_dir: Path, data: bytes) -> str:
    digest = "sha256:" + sha256_bytes(data)
    path = artifact_path(run_dir, digest)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data, durable=False)
    return digest


def get_artifact(run_dir: Path, digest: str) -> bytes:
    """Read an artifact and check it still hashes to its name."""
    path = artifact_path(run_dir, digest)
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise ArchiveCorrupt(f"artifact {digest} is missing", where=str(run_dir)) from exc
    if "sha256:" + sha256_bytes(data) != digest:
        raise ArchiveCorrupt(f"artifact {digest} does not match its hash", where=str(path))
    return data


def get_json(run_dir: Path, digest: str) -> Any:
    return json.loads(get_artifact(run_dir, digest))
