"""rsiframe.util.procs: alive, dying or gone through /proc, and what a driver left running
found by the marker in its environment or the lock it holds: real processes, no mocks."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from rsiframe.util import procs

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _spawn(env: dict[str, str] | None = None, *argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(argv) or SLEEP, env={**os.environ, **(env or {})})


def test_a_running_process_is_alive_and_a_zombie_or_missing_one_is_not() -> None:
    assert procs.alive(os.getpid())
    child = _spawn()
    try:
        assert procs.alive(child.pid)
        child.kill()
        time.sleep(0.3)  # not reaped yet: a zombie
        assert not procs.alive(child.pid)
    finally:
        child.wait()
    assert not procs.alive(child.pid) and not procs.alive(None) and not procs.alive(0)


def test_leftovers_are_found_by_the_marker_or_the_lock_never_by_name(tmp_path: Path) -> None:
    lock = tmp_path / "gateway.lock"
    hold = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\ntime.sleep(60)\n"
    )
    marked = _spawn({"RSIFRAME_DRIVER": "run-a:1"})
    other = _spawn({"RSIFRAME_DRIVER": "run-b:1"})  # another run's driver: not ours
    holder = _spawn(None, sys.executable, "-c", hold, str(lock))
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = {p.pid: p for p in procs.leftovers("RSIFRAME_DRIVER", "run-a:1", lock)}
            if holder.pid in found:
                break
            time.sleep(0.05)
        assert set(found) == {marked.pid, holder.pid}
        assert found[holder.pid].holds == "gateway.lock" and found[marked.pid].holds is None
        assert str(marked.pid) in str(found[marked.pid])
        procs.end([marked.pid, holder.pid])
        marked.wait(5), holder.wait(5)
        assert other.poll() is None  # never touched
        fd = os.open(lock, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the holder is gone: free
        os.close(fd)
    finally:
        for p in (marked, other, holder):
            p.kill()
            p.wait()


def test_the_caller_and_its_ancestors_are_never_leftovers(tmp_path: Path) -> None:
    # a child carrying the marker looks for leftovers of that marker: itself is not one
    code = (
        "import os, pathlib\nfrom rsiframe.util import procs\n"
        "found = procs.leftovers('RSIFRAME_DRIVER', 'run-c:1', pathlib.Path('none.lock'))\n"
        "print(os.getpid(), [p.pid for p in found])\n"
    )
    sibling = _spawn({"RSIFRAME_DRIVER": "run-c:1"})
    try:
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "RSIFRAME_DRIVER": "run-c:1"},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split(maxsplit=1)
    finally:
        sibling.kill()
        sibling.wait()
    me, found = int(out[0]), eval(out[1])
    assert me not in found and sibling.pid in found
