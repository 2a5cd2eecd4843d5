"""rsiframe.util.cpuslots: one process-wide cap on CPU-heavy steps."""

from __future__ import annotations

import pytest


def test_cpu_slots_cap_cpu_heavy_steps_process_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from rsiframe.util import cpuslots

    monkeypatch.setattr(cpuslots, "_slots", cpuslots._Slots(2))
    busy, most = [0], [0]
    lock = threading.Lock()

    def build(threads: int) -> None:
        held = min(threads, 2)  # a step wider than the machine takes all of it
        with cpuslots.cpu_slot(threads):
            with lock:
                busy[0] += held
                most[0] = max(most[0], busy[0])
            time.sleep(0.05)
            with lock:
                busy[0] -= held

    workers = [threading.Thread(target=build, args=(n,)) for n in (1, 1, 1, 2, 8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=10)
    assert most[0] == 2  # never more than the slots
    monkeypatch.setenv("RSIFRAME_CPU_SLOTS", "3")
    assert cpuslots.default_slots() == 3
