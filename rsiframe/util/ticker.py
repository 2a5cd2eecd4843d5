"""One daemon thread that calls every registered check at a fixed interval.

A sandboxed command is watched while it runs (its deadline, its output's size, its
folders and cgroups: :class:`rsiframe.sandbox.bwrap.Sandbox.run`). A thread of its own
per command cost a thread start and a join on the critical path of every agent and
verifier; here one thread ticks all of them. :func:`every` registers a check; the check
returns True when it is done (it is then dropped). :meth:`Ticking.cancel` drops it and,
if the ticker is calling it at that moment, waits for the call to end, as joining the
command's own thread did. A check that raises is reported (``threading.excepthook``)
and dropped; the others go on. A slow check delays the others' next call by as much.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

#: a ticker with nothing to check this long ends
IDLE_S = 10.0

_lock = threading.Lock()
_checks: dict[float, list[Ticking]] = {}  # interval -> its checks
_threads: dict[float, threading.Thread] = {}


class Ticking:
    """One registered check (:func:`every`)."""

    def __init__(self, check: Callable[[], bool]) -> None:
        self.check = check
        self.calling = threading.Lock()  # held while the ticker calls it
        self.dropped = False

    def cancel(self) -> None:
        """Drop the check; returns once no call of it is running."""
        with self.calling:
            self.dropped = True

    def tick(self) -> bool:
        """Call the check unless dropped; True once it is done."""
        with self.calling:
            if self.dropped:
                return True
            try:
                done = self.check()
            except Exception:
                threading.excepthook(
                    threading.ExceptHookArgs([*sys.exc_info(), threading.current_thread()])
                )
                done = True
            self.dropped = self.dropped or done
            return self.dropped


def every(interval: float, check: Callable[[], bool]) -> Ticking:
    """Call ``check`` every ``interval`` seconds, on the ticker's thread, until it returns
    True or is cancelled."""
    t = Ticking(check)
    with _lock:
        _checks.setdefault(interval, []).append(t)
        thread = _threads.get(interval)
        if thread is None or not thread.is_alive():
            thread = threading.Thread(
                target=_loop, args=(interval,), name="rsi-ticker", daemon=True
            )
            _threads[interval] = thread
            thread.start()
    return t


def _loop(interval: float) -> None:
    next_at = time.monotonic() + interval
    idle_since: float | None = None
    while True:
        time.sleep(max(0.0, next_at - time.monotonic()))
        next_at = max(next_at + interval, time.monotonic())
        with _lock:
            checks = list(_checks.get(interval, ()))
        done = [t for t in checks if t.tick()]
        with _lock:
            live = _checks.get(interval, [])
            for t in done:
                live.remove(t)
            if live:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > IDLE_S:  # the next check starts a thread
                _checks.pop(interval, None)
                _threads.pop(interval, None)
                return


def _forget() -> None:
    """In a forked child, the parent's ticker threads do not exist."""
    global _lock
    _lock = threading.Lock()
    _checks.clear()
    _threads.clear()


os.register_at_fork(after_in_child=_forget)
