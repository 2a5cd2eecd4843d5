"""Candidates in flight: worker threads and the one writer's inbox.

Workers run a candidate's mutation or one of its evaluations; anything they want
recorded (evidence events, the final outcome) goes to the writer as a closure in
:attr:`Inflight.inbox`, which only the writer thread drains. So exactly one thread
appends events and folds state, whatever K is.

Workers are daemon threads (:mod:`rsiframe.util.workers`, reused from one job to the
next): a run interrupted with work in flight does not wait for them at exit (their
sandboxes are killed; their open attempts re-run on resume).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rsiframe.sandbox.bwrap import kill_all
from rsiframe.util import workers

Closure = Callable[[], None]
#: while the writer waits, events older than this are synced (nothing acts on them)
SYNC_AGE_S = 1.0


@dataclass(eq=False)  # each job is itself (a candidate's jobs side by side may look alike)
class Job:
    """One unit of work in flight: a candidate's mutation or one evaluation."""

    cid: str
    what: str  # "mutate" or "evaluate <split>"
    started: float = field(default_factory=time.monotonic)


class Inflight:
    """Up to ``k`` jobs at once, one per candidate unless started ``beside`` its others
    (the seed's independent splits); results come back to the writer."""

    def __init__(
        self,
        k: int,
        cancel: Callable[[], None] | None = None,
        sync: Callable[[float], None] | None = None,
    ) -> None:
        self.k = k
        #: kills work in flight beyond this host's sandboxes (a remote executor's tasks)
        self.cancel = cancel
        #: makes the writer's events durable (those older than the argument, in seconds):
        #: the older ones while the writer waits
        self.sync = sync or (lambda max_age: None)
        self.inbox: queue.SimpleQueue[Closure] = queue.SimpleQueue()
        #: the jobs in flight of each busy candidate (one, or the seed's splits side by side)
        self.jobs: dict[str, list[Job]] = {}
        self.writer = threading.get_ident()
        self._idle = 0

    def on_writer(self) -> bool:
        return threading.get_ident() == self.writer

    def synced(self) -> None:
        """On the writer, make its events durable (before the sealed evaluation)."""
        if self.on_writer():
            self.sync(0.0)

    def post(self, fn: Closure) -> None:
        """Hand ``fn`` to the writer (from any thread)."""
        self.inbox.put(fn)

    def free(self) -> int:
        return self.k - sum(len(jobs) for jobs in self.jobs.values())

    def start(self, cid: str, what: str, work: Callable[[], Closure], beside: bool = False) -> None:
        """Run ``work`` on a worker; the closure it returns runs on the writer.

        ``beside``: ``cid`` may already have work in flight (another of its evaluations).
        An exception in ``work`` is raised on the writer (the run then fails, resumable).
        """
        # no sync point here: a mutation's or evaluation's effects are scratch (lost with
        # the machine, re-run on resume) or durable on their own (the gateway's ledger,
        # a task-run charge); the certificates it returns are synced before a gate reads them
        assert beside or cid not in self.jobs, f"{cid} already has work in flight"
        job = Job(cid, what)
        self.jobs.setdefault(cid, []).append(job)

        def finish(done: Closure) -> Closure:
            def on_writer() -> None:
                mine = self.jobs[cid]
                mine.remove(job)
                if not mine:
                    del self.jobs[cid]
                done()

            return on_writer

        def run() -> None:
            try:
                done = work()
            except BaseException as exc:
                err = exc

                def done() -> None:
                    raise err

            self.post(finish(done))

        workers.submit(run, name=f"rsi-{cid}")

    def pause(self, waiting: bool) -> None:
        """Between two steps: take back results; ``waiting`` (nothing could start) blocks
        for the next one, and with nothing in flight the next step must move."""
        if waiting and self.jobs:
            self.sync(SYNC_AGE_S)  # evidence appended meanwhile: durable within ~1.5 s
            self.drain(timeout=0.5)
        elif waiting:
            self._idle += 1
            if self._idle > 2:
                raise RuntimeError("the scheduler stalled with nothing in flight")
        else:
            self._idle = 0
            self.drain()

    def wind_down(self, grace: float) -> None:
        """Take back what finishes within ``grace`` seconds (the caller starts nothing new),
        then kill the sandboxes of what is still in flight (its attempts re-run on resume)."""
        deadline = time.monotonic() + grace
        try:
            while self.jobs and time.monotonic() < deadline:
                self.drain(timeout=min(0.2, max(0.01, deadline - time.monotonic())))
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: stop waiting
        except Exception:  # a failing worker's error is the next session's business
            pass
        if self.jobs:
            kill_all()
            if self.cancel is not None:
                self.cancel()

    def drain(self, timeout: float | None = None) -> int:
        """Run what workers posted; with ``timeout``, wait that long for the first."""
        n = 0
        try:
            fn = self.inbox.get(timeout=timeout) if timeout else self.inbox.get_nowait()
        except queue.Empty:
            return 0
        while True:
            fn()
            n += 1
            try:
                fn = self.inbox.get_nowait()
            except queue.Empty:
                return n
