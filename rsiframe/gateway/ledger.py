"""The model-call ledger: one fsynced JSON line per metered call, evidence beside it.

The gateway (:mod:`rsiframe.gateway.app`) is its only writer. Each :class:`Entry` is what the
engine will turn into a ``model_call`` event (tokens, cost, latency, model, consumer,
candidate, slot, request digest, evidence digests); :meth:`Ledger.put` stores request and
response bodies content-addressed under ``evidence/``. Reopening a folder folds the lines
back into totals and the digest cache, so a restarted gateway never pays twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass
class Entry:
    """One metered call, as the ledger line the engine will turn into a ``model_call`` event."""

    seq: int
    ts: float
    path: str
    model: str  # the recipe's name
    consumer: str
    candidate: str | None
    slot: str | None
    digest: str  # the request digest (the cache key)
    status: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    cached: bool = False
    usage_source: str = "provider"  # provider | estimate | none
    request: str | None = None  # evidence digests (files under evidence/)
    response: str | None = None
    stream: bool = False
    error: str | None = None
    #: a refusal's reason: max_model_tokens | max_cost | allowance (429), model_not_allowed
    #: (403: the consumer's token is not bound to that model), invalid_limit (400)
    code: str | None = None
    reserved_tokens: int = 0  # the call's reservation: prompt estimate + every output choice
    rewritten: str | None = None  # what the gateway added to the forwarded body (a limit)
    excess_tokens: int = 0  # output the provider reported past the reservation: not charged
    excess_cost_usd: float = 0.0
    violation: str | None = None  # provider_excess: ...


@dataclass
class Totals:
    tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0


class Ledger:
    """Append-only JSON lines (fsynced) plus content-addressed evidence beside them.

    ``folder/ledger.jsonl`` holds one :class:`Entry` per call; ``folder/evidence/SHA``
    holds each request and response body. Reopening a folder reloads totals and the
    digest cache, so a restarted gateway never pays twice for a recorded call.
    """

    def __init__(
        self,
        folder: Path,
        on_record: Callable[[Entry], None] | None = None,
        *,
        fsync: bool = True,
    ) -> None:
        self.folder = Path(folder)
        #: fsync each line (survives a machine crash); without it a line survives SIGKILL
        self.fsync = fsync
        (self.folder / "evidence").mkdir(parents=True, exist_ok=True)
        self.path = self.folder / "ledger.jsonl"
        self.on_record = on_record
        self.totals = Totals()
        self.cache: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._leader = threading.Lock()
        self._queue: list[tuple[Entry, threading.Event]] = []
        self.seq = 0
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                with contextlib.suppress(ValueError, TypeError):
                    self._fold(Entry(**json.loads(line)))

    def _fold(self, e: Entry) -> None:
        self.seq = max(self.seq, e.seq)
        self.totals.tokens += e.prompt_tokens + e.completion_tokens
        self.totals.cost_usd += e.cost_usd
        self.totals.calls += 1
        if e.status == 200 and not e.cached and e.response:
            self.cache.setdefault(e.digest, e)

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self.folder / "evidence" / digest
        if not target.exists():
            tmp = target.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
            tmp.write_bytes(data)
            tmp.replace(target)
        return digest

    def get(self, digest: str) -> bytes:
        data = (self.folder / "evidence" / digest).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"evidence {digest} does not match its digest")
        return data

    def append(self, entry: Entry) -> Entry:
        """Number ``entry``, write it and make it durable before returning (thread-safe).

        Group commit: lines queued while another thread is in ``fdatasync`` are written and
        synced together by the next leader, so concurrent calls share one sync instead of
        queueing for one each; every caller still returns only once its own line is durable.
        """
        done = threading.Event()
        with self._lock:
            self.seq += 1
            entry.seq = self.seq
            self._queue.append((entry, done))
        while not done.is_set():
            with self._leader:  # one thread writes a batch at a time; the rest wait for it
                if done.is_set():
                    break
                with self._lock:
                    batch, self._queue = self._queue, []
                self._write([e for e, _ in batch])
                for e, ev in batch:
                    with self._lock:
                        self._fold(e)
                    ev.set()
                for e, _ in batch:
                    if self.on_record is not None:
                        self.on_record(e)
        return entry

    def _write(self, entries: list[Entry]) -> None:
        data = b"".join(
            (json.dumps(vars(e), sort_keys=True) + "\n").encode()
            for e in sorted(entries, key=lambda e: e.seq)
        )
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            if self.fsync:
                os.fdatasync(fd)
        finally:
            os.close(fd)


_ENTRY_FIELDS = {f.name for f in fields(Entry)}


class LedgerTail:
    """The ledger's complete lines not read yet, in order (safe from any thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lock = threading.Lock()

    def read(self) -> list[Entry]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size <= self.offset:
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read(size - self.offset)
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            with contextlib.suppress(ValueError, TypeError):
                raw = json.loads(line)
                out.append(Entry(**{k: v for k, v in raw.items() if k in _ENTRY_FIELDS}))
        return out
