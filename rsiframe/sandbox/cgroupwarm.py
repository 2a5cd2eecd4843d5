"""The keeper that keeps the kernel's cgroup-join path warm (standard library only: it runs
as a script, ``python -I -S cgroupwarm.py PROCS IDLE_S``, with nothing of rsiframe imported).

Why. A process joins a cgroup v1 by writing to its ``cgroup.procs``. The kernel takes a
global lock for that write, and after about 20 ms without such a write the lock's first
taker waits out an RCU grace period first: 6-15 ms on this kind of host, measured by
``bench/cgroupjoin.py``. Every sandboxed command joins its own cgroups, so every command
paid it, and the wait moved with the host's load.

What. A write that moves a process into the cgroup it is already in takes the same lock,
moves nothing, and keeps the lock on its fast path for a grace period more. This keeper
sits in a cgroup of its own (``PROCS``, under rsiframe's folder of the hierarchy, no limit
on it) and writes itself into it every :data:`EVERY_S`, so a command's join costs about a
tenth of a millisecond. It reads its standard input: each byte is a command about to
start; :data:`EVERY_S` after none for ``IDLE_S`` it ends, and it ends at once when the
input closes (the rsiframe process that started it is gone, however it ended).
"""

from __future__ import annotations

import os
import select
import sys
import time

#: between two writes: well under the ~20 ms after which the fast path is left
EVERY_S = 0.004


def keep(procs: str, idle_s: float) -> None:
    fd = os.open(procs, os.O_WRONLY)
    last = time.monotonic()
    while True:
        os.write(fd, b"0")
        ready, _, _ = select.select([0], [], [], EVERY_S)
        if ready:
            if not os.read(0, 4096):
                return  # the rsiframe process is gone
            last = time.monotonic()
        elif time.monotonic() - last > idle_s:
            return


if __name__ == "__main__":
    keep(sys.argv[1], float(sys.argv[2]))
