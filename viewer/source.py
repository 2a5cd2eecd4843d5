"""One run folder as the viewer sees it: read in chunks, folded as it grows, never written.

:class:`RunSource` keeps a byte offset into ``events.jsonl`` and folds only the lines
past it, so a first screen can be painted after the first chunk and a live run costs
one ``stat`` per poll plus its new lines. Each chunk is chain-checked from the last
event already read and the newest event of the chunk must carry the run's signature
(which covers every event before it, as in :func:`rsiframe.archive.loader.load_run`). Scores come
from :class:`rsiframe.archive.state.RunState`, i.e. only from certificates that verify and bind.

A torn or half-written last line is left unread (and reported); nothing is repaired,
locked or cached inside the run folder.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsiframe.archive.loader import open_verifier, require_signed
from rsiframe.archive.log import GENESIS, Event, parse_line
from rsiframe.archive.runfolder import RunPaths, is_live
from rsiframe.archive.state import Candidate, RunState
from rsiframe.engine.budget import BudgetGuard
from rsiframe.errors import ArchiveCorrupt
from rsiframe.recipe.schema import Budget

CHUNK_BYTES = 1 << 20
FIRST_CHUNK = 256 << 10  # small, so that the first screen fills at once
FOLD_BATCH = 256  # events folded per hold of the lock
RUN = "<run>"  # the changed-id that means "run-level fields changed"


@dataclass(frozen=True)
class Row:
    """One candidate as tables show it."""

    id: str
    index: int
    generation: int
    parent: str
    state: str
    train: float | None
    gate: float | None
    sealed: float | None
    decision: str
    badge: str
    description: str
    merged: str = ""  # a merge's second parent (the lineage is a DAG)


@dataclass
class Update:
    """What one :meth:`RunSource.read_more` call folded."""

    changed: set[str] = field(default_factory=set)
    events: int = 0
    done: bool = True


@dataclass(frozen=True)
class _Chunk:
    """Bytes read from events.jsonl at the offset, whether they reach its end, the file's
    (size, mtime) when read, and the complete lines among them."""

    data: bytes
    at_end: bool
    seen: tuple[int, int]
    cut: int  # the length of the complete lines (a torn last line is left for later)
    lines: list[bytes]


def badge(c: Candidate) -> str:
    """✓ every evaluation certified and bound; ✗ a certificate was rejected; ! failed;
    … evaluating; · never evaluated."""
    tries = [a for attempts in c.attempts.values() for a in attempts]
    if any(a.status == "invalid" for a in tries):
        return "✗"
    if not tries:
        return "·"
    if any(a.status == "running" for a in tries) and c.state == "evaluating":
        return "…"
    if all(c.record(split) is not None for split in c.attempts):
        return "✓"
    return "!" if c.state == "failed" else "…"


def in_flight(st: RunState) -> list[tuple[str, str]]:
    """Candidates in flight and their stage: mutating, waiting for a slot, evaluating a
    split, or waiting for the gate (generational mode gates a whole generation at once)."""
    out = []
    for c in st.candidates.values():
        s = c.state
        if s == "proposed":
            out.append((c.id, "mutating"))
        elif s == "mutated":
            out.append((c.id, "waiting for a slot"))
        elif s == "evaluating":
            running = [a.split for t in c.attempts.values() for a in t if a.status == "running"]
            out.append((c.id, f"evaluating {running[0]}" if running else "waiting for a slot"))
        elif s == "certified" and not c.is_seed:
            out.append((c.id, "waiting for the gate"))
    return out


def row_of(c: Candidate) -> Row:
    decision = c.decision["reason"] if c.decision else ""
    if c.rejected:
        reasons = c.rejected.get("reasons") or []
        decision = f"{c.rejected.get('stage')}: {reasons[0] if reasons else ''}"
    elif c.abandoned is not None:
        decision = f"abandoned: {c.abandoned}"
    elif c.state == "failed":
        errors = [a.error for t in c.attempts.values() for a in t[-1:] if a.error]
        decision = errors[0] if errors else "evaluation failed"
    return Row(
        id=c.id,
        index=c.index,
        generation=c.generation,
        parent=c.parent or "",
        state=c.state,
        train=c.score("train"),
        gate=c.score("gate"),
        sealed=c.score("sealed"),
        decision=decision,
        badge=badge(c),
        description=c.description or (c.rejected or {}).get("description", ""),
        merged=c.second_parent or "",
    )


def parse_event(line: bytes, seq: int, prev: str, path: str) -> Event:
    """One line of ``events.jsonl``, checked against its position and the previous hash."""
    where = f"{path}: event {seq}"
    ev = parse_line(line, where)
    if ev.seq != seq:
        raise ArchiveCorrupt(f"sequence number {ev.seq} out of order", where=where)
    if ev.prev != prev:
        raise ArchiveCorrupt(f"hash chain broken before event {seq}", where=where)
    return ev


def is_driven(paths: RunPaths, proc_locks: Path = Path("/proc/locks")) -> bool:
    """Whether some process holds the run's ``run.lock``, without taking any lock.

    On Linux the kernel lists every flock in /proc/locks by device and inode, so the
    viewer never competes with ``resume`` for the lock; elsewhere it falls back to
    :func:`rsiframe.archive.runfolder.is_live` (a brief shared-lock probe).
    """
    try:
        st = os.stat(paths.lockfile)
    except OSError:
        return False
    try:
        table = proc_locks.read_text()
    except OSError:
        return is_live(paths)
    for line in table.splitlines():
        fields = line.split()
        if "->" in fields:  # a waiter: "1: -> FLOCK ..."
            continue
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        major, minor, inode = [*fields[5].split(":"), "", "", ""][:3]
        try:
            if int(inode) == st.st_ino and os.makedev(int(major, 16), int(minor, 16)) == st.st_dev:
                return True
        except ValueError:
            continue
    return False


class RunSource:
    """A run folder opened for reading; :meth:`read_more` folds what was appended since."""

    def __init__(self, root: Path) -> None:
        self.paths = RunPaths(Path(root).resolve()).check()
        self.verifier = open_verifier(self.paths)
        lock = self.paths.read_json(self.paths.recipe_lock)
        self.recipe: dict[str, Any] = lock.get("resolved", {})
        self.recipe_source: str = str(lock.get("source", ""))
        self.state = RunState(verifier=self.verifier)
        #: held while folding; readers of ``state`` from another thread take it too
        self.lock = threading.RLock()
        self.events_of: dict[str, list[Event]] = {}
        self._rows: dict[str, Row] = {}  # kept current by read_more, in proposal order
        self.error: str | None = None
        self.torn = 0
        self.live = False
        self.loaded = False
        self._offset = 0
        self._seq = 0
        self._prev = GENESIS
        self._seen: tuple[int, int] | None = None
        self._live_checked = 0.0

    @property
    def root(self) -> Path:
        return self.paths.root

    @property
    def name(self) -> str:
        return self.state.name or self.root.name

    # -- reading -------------------------------------------------------------------

    def _stat(self) -> tuple[int, int]:
        st = os.stat(self.paths.events)
        return st.st_size, st.st_mtime_ns

    def changed(self) -> bool:
        """Whether events.jsonl grew or changed since the last read (one stat)."""
        if self.error is not None:
            return False
        try:
            return self._stat() != self._seen
        except OSError:
            return False

    def poll_live(self, every: float = 5.0) -> bool:
        """Re-check now and then whether a process drives the run (see :func:`is_driven`)."""
        now = time.monotonic()
        if now - self._live_checked >= every:
            self._live_checked = now
            self.live = is_driven(self.paths)
        return self.live

    def read_more(self, max_bytes: int | None = None) -> Update:
        """Fold the next complete lines (at most about ``max_bytes``)."""
        if max_bytes is None:
            max_bytes = CHUNK_BYTES if self._offset else FIRST_CHUNK
        up = Update()
        if self.error is not None:
            return up
        chunk = self._read_chunk(max_bytes)
        if chunk is None:
            return up
        if not chunk.lines and not chunk.at_end and chunk.data:  # one line longer than a chunk
            return self.read_more(max_bytes * 4)
        try:
            events = self._parse(chunk.lines)
            require_signed(events, self.verifier, str(self.paths.events))
            self._fold(events, up.changed)
        except ArchiveCorrupt as exc:
            self.error = str(exc)
            up.changed.add(RUN)
            return up
        self._advance(chunk, len(events), up)
        return up

    def _read_chunk(self, max_bytes: int) -> _Chunk | None:
        """The next ``max_bytes`` of events.jsonl past the offset (None: unreadable, and
        :attr:`error` says why)."""
        try:
            seen = self._stat()
            with self.paths.events.open("rb") as f:
                f.seek(self._offset)
                data = f.read(max_bytes)
                at_end = f.tell() >= seen[0]
        except OSError as exc:
            self.error = f"cannot read events.jsonl: {exc}"
            return None
        cut = data.rfind(b"\n") + 1
        return _Chunk(data, at_end, seen, cut, data[:cut].split(b"\n")[:-1])

    def _fold(self, events: list[Event], changed: set[str]) -> None:
        """Apply ``events`` to the state, adding the ids they change to ``changed``."""
        for start in range(0, len(events), FOLD_BATCH):  # let readers in between
            with self.lock:
                for ev in events[start : start + FOLD_BATCH]:
                    self._apply(ev, changed)
            time.sleep(0)  # a waiting reader gets the lock (CPython locks are not fair)
        with self.lock:
            cands = self.state.candidates
            for cid in sorted((i for i in changed if i in cands), key=lambda i: cands[i].index):
                self._rows[cid] = row_of(cands[cid])

    def _apply(self, ev: Event, changed: set[str]) -> None:
        """Fold one event; a candidate's event is also kept under its id."""
        self.state.apply(ev)
        cid = ev.data.get("candidate" if ev.type == "model_call" else "id")
        if isinstance(cid, str) and cid in self.state.candidates:
            changed.add(cid)
            self.events_of.setdefault(cid, []).append(ev)
        if ev.type == "model_call" or cid not in self.state.candidates:
            changed.add(RUN)  # a model call also moves the run's cost

    def _advance(self, chunk: _Chunk, events: int, up: Update) -> None:
        """Move past a chunk's folded lines; on reaching the end, note what was seen."""
        self._offset += chunk.cut
        up.events = events
        up.done = chunk.at_end or self._offset >= chunk.seen[0]
        self.torn = len(chunk.data) - chunk.cut if chunk.at_end else 0
        if not up.done:
            return
        self._seen = chunk.seen
        if not self.loaded:
            self.loaded = True
            self.poll_live(every=0)
            up.changed.add(RUN)

    def _parse(self, lines: list[bytes]) -> list[Event]:
        events = []
        path = str(self.paths.events)
        for line in lines:
            ev = parse_event(line, self._seq, self._prev, path)
            if self._seq == 0 and ev.type != "run_started":
                raise ArchiveCorrupt("the archive does not begin with run_started")
            events.append(ev)
            self._seq += 1
            self._prev = ev.hash
        return events

    def read_all(self) -> None:
        while not self.read_more().done:
            pass

    # -- queries (call from any thread) ----------------------------------------------

    def rows(self, ids: set[str] | None = None) -> list[Row]:
        """Table rows (computed as events are folded, so this is cheap)."""
        with self.lock:
            if ids is None:
                return list(self._rows.values())
            return [self._rows[i] for i in ids if i in self._rows]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows():
            out[r.state] = out.get(r.state, 0) + 1
        return out

    def champion_id(self) -> str | None:
        """As :meth:`RunState.champion`: best verified gate among admitted, earliest on ties.

        Kept over the cached rows: ``RunState.champion`` recomputes every candidate's state,
        about 40 times slower at 10,000 candidates, under the lock, on the UI thread.
        """
        best: Row | None = None
        for r in self.rows():
            if (
                r.state == "admitted"
                and r.gate is not None
                and (best is None or r.gate > (best.gate or 0.0))
            ):
                best = r
        return best.id if best else None

    def candidate(self, cid: str) -> Candidate | None:
        with self.lock:
            return self.state.candidates.get(cid)

    def run_state(self) -> str:
        """running | finished | interrupted | budget_exhausted | failed (or loading)."""
        if self.error is not None:
            return "unreadable"
        if not self.loaded:
            return "loading"
        if self.state.terminal is not None:
            return str(self.state.terminal["state"])
        return "running" if self.live else "interrupted"

    def budget(self) -> dict[str, Any]:
        with self.lock:
            guard = BudgetGuard(Budget.model_validate(self.recipe.get("budget") or {}))
            now = time.time() if self.live and self.state.terminal is None else None
            return guard.report(self.state, now)

    def champion(self) -> Candidate | None:
        cid = self.champion_id()
        return self.candidate(cid) if cid else None

    def champion_path(self) -> list[str]:
        """Candidate ids from the seed to the champion (empty without a champion)."""
        rows = {r.id: r for r in self.rows()}
        path = []
        cid = self.champion_id()
        while cid:
            path.append(cid)
            cid = rows[cid].parent if cid in rows else ""
        return path[::-1]

    def children(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for r in sorted(self.rows(), key=lambda r: r.index):
            if r.parent:
                out.setdefault(r.parent, []).append(r.id)
        return out

    def merged_into(self) -> dict[str, list[str]]:
        """Second parent -> the merges it went into (their first parent holds them)."""
        out: dict[str, list[str]] = {}
        for r in sorted(self.rows(), key=lambda r: r.index):
            if r.merged:
                out.setdefault(r.merged, []).append(r.id)
        return out

    def events_for(self, cid: str) -> list[Event]:
        with self.lock:
            return list(self.events_of.get(cid, []))

    def notes(self) -> list[str]:
        out = []
        if self.error:
            out.append(f"archive: {self.error}")
        if self.torn:
            out.append(f"the last line is incomplete ({self.torn} bytes): torn or being written")
        with self.lock:
            out += self.state.problems
        return out
