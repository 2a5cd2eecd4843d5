"""rsiframe.engine.leftovers: before a resume, what a SIGKILLed driver left running is
settled: its gateway waited for (bounded, with lines saying so) or ended past the bound, any
other process of it ended; a live driver is refused with its pid. Real processes: a driver
that takes the run's lock and starts a "sandbox" and a "gateway" holding the gateway's lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rsiframe.archive.runfolder import RunPaths
from rsiframe.engine import leftovers
from rsiframe.errors import RunFolderError
from rsiframe.util import procs

DRIVER = """
import subprocess, sys, time
from pathlib import Path
from rsiframe.archive.runfolder import RunLock, RunPaths
root = Path(sys.argv[1])
RunLock(RunPaths(root)).acquire()  # marks this process's environment for its children
sandbox = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
gw_lock = str(root / "model-calls" / "gateway.lock")
gateway = subprocess.Popen([sys.executable, "-c", sys.argv[3], gw_lock, sys.argv[2]])
print(sandbox.pid, gateway.pid, flush=True)
time.sleep(120)
"""
GATEWAY = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
time.sleep(float(sys.argv[2]))
"""


def _driver(root: Path, gateway_s: float) -> tuple[subprocess.Popen[str], int, int]:
    (root / "model-calls").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(root), str(gateway_s), GATEWAY],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    sandbox, gateway = map(int, proc.stdout.readline().split())
    time.sleep(0.5)  # the gateway holds its lock
    return proc, sandbox, gateway


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def test_resume_waits_for_the_killed_drivers_gateway_and_ends_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSIFRAME_LEFTOVER_WAIT_S", "30")
    driver, sandbox, gateway = _driver(tmp_path, gateway_s=3)
    _kill(driver)
    said: list[str] = []
    t0 = time.monotonic()
    lock = leftovers.take_lock(RunPaths(tmp_path), said.append)
    try:
        waited = time.monotonic() - t0
        assert not procs.alive(sandbox) and not procs.alive(gateway)
        assert 1.0 < waited < 30  # the gateway's own finish, not the bound
        assert any("ended 1 process(es)" in s and str(sandbox) in s for s in said), said
        assert any(f"waiting up to 30 s for its gateway (pid {gateway})" in s for s in said)
        assert said[-1].startswith("its gateway finished and recorded its calls")
    finally:
        lock.release()


def test_a_gateway_still_running_past_the_bound_is_ended_and_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSIFRAME_LEFTOVER_WAIT_S", "1")
    driver, _sandbox, gateway = _driver(tmp_path, gateway_s=120)
    _kill(driver)
    said: list[str] = []
    lock = leftovers.take_lock(RunPaths(tmp_path), said.append)
    lock.release()
    assert not procs.alive(gateway)
    assert said[-1].startswith(f"ended its gateway (pid {gateway}) after 1 s")


def test_a_live_driver_is_refused_with_its_pid_and_left_alone(tmp_path: Path) -> None:
    driver, sandbox, gateway = _driver(tmp_path, gateway_s=120)
    try:
        with pytest.raises(RunFolderError, match=f"another process \\(pid {driver.pid}\\)"):
            leftovers.take_lock(RunPaths(tmp_path), lambda line: None)
        assert all(procs.alive(p) for p in (driver.pid, sandbox, gateway))
    finally:
        for pid in (sandbox, gateway):
            os.kill(pid, signal.SIGKILL)
        _kill(driver)


def test_a_driver_that_exited_cleanly_leaves_nothing_to_settle(tmp_path: Path) -> None:
    said: list[str] = []
    leftovers.take_lock(RunPaths(tmp_path), said.append).release()  # no driver before
    leftovers.take_lock(RunPaths(tmp_path), said.append).release()  # ours, released
    assert said == []
