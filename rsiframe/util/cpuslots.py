"""One process-wide limit on CPU-heavy work (D/T/H builds: data steps and training).

Candidates in flight compose with an evaluator's own task concurrency; work that
mostly waits (agents waiting on a model, sleeping tasks, model calls) is limited
only by those two. Work that keeps cores busy takes a slot here first, so K
candidates in flight never run more builds at once than the machine has cores
(``RSIFRAME_CPU_SLOTS`` overrides the default, the number of cores).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator


def default_slots() -> int:
    raw = os.environ.get("RSIFRAME_CPU_SLOTS", "")
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    return max(1, os.cpu_count() or 1)


class _Slots:
    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.cond = threading.Condition()

    @contextlib.contextmanager
    def hold(self, n: int) -> Iterator[None]:
        n = min(max(1, n), self.total)  # a step wider than the machine takes all of it
        with self.cond:
            self.cond.wait_for(lambda: self.used + n <= self.total)
            self.used += n
        try:
            yield
        finally:
            with self.cond:
                self.used -= n
                self.cond.notify_all()


_slots = _Slots(default_slots())


def cpu_slot(n: int = 1) -> contextlib.AbstractContextManager[None]:
    """Hold ``n`` of the process's CPU slots (a step's threads) while a CPU-heavy step runs."""
    return _slots.hold(n)
