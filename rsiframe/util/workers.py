"""Daemon worker threads, reused from one job to the next.

Starting a thread costs its creation and a hand-shake with the new thread (it must be
scheduled and take the GIL before ``start`` returns): 0.08 ms on a quiet machine, and
several times that while a trial and the reaper's deletions hold the GIL, on the
critical path of every mutation and evaluation. :func:`submit` hands a job to an idle
worker when there is one and starts a new worker only when there is none; a worker left
idle for :data:`IDLE_S` seconds ends. Workers are daemon threads, as the threads they
replace were: an interrupted run does not wait for its work in flight at exit.

Every job gets a worker of its own at once (never a queue behind a busy one), so the
number of threads is the number of jobs running at the same time.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable

#: a worker idle this long ends (the next job starts a new one)
IDLE_S = 10.0

_lock = threading.Lock()
_idle: list[_Worker] = []


class _Worker:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[str, Callable[[], None]]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="rsi-worker", daemon=True)

    def _loop(self) -> None:
        while True:
            try:
                name, job = self.jobs.get(timeout=IDLE_S)
            except queue.Empty:
                with _lock:
                    if self in _idle:  # nobody handed it a job meanwhile: it ends
                        _idle.remove(self)
                        return
                continue  # taken from the idle list: its job is on the way
            self.thread.name = name
            try:
                job()
            except BaseException:  # reported as an ending thread's would be; it goes on
                threading.excepthook(threading.ExceptHookArgs([*sys.exc_info(), self.thread]))
            self.thread.name = "rsi-worker"
            with _lock:
                _idle.append(self)


def submit(job: Callable[[], None], name: str = "rsi-worker") -> None:
    """Run ``job`` on an idle worker, or on a new one (named ``name`` while it runs).
    ``job`` must handle its own exceptions: one that escapes is reported by
    ``threading.excepthook`` and the worker goes on."""
    with _lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
        worker.jobs.put((name, job))
        worker.thread.start()
        return
    worker.jobs.put((name, job))


def _forget() -> None:
    """In a forked child, the parent's workers do not exist."""
    global _lock
    _lock = threading.Lock()
    _idle.clear()


os.register_at_fork(after_in_child=_forget)
