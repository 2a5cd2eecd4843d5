"""rsiframe.sandbox.cgroups: the pids and memory cgroups of one sandboxed run, made and removed for
real (cgroup v1, as root); the fallback without them is named, or an error in CI."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rsiframe.errors import SandboxError
from rsiframe.sandbox import cgroups
from rsiframe.sandbox.bwrap import Limits, Mount, ProcessSandbox
from tests.support.cgroups import need_cgroup


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_threads_asking_at_once_all_get_the_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two first calls at once used to collide on one probe name and leave the whole
    process on RLIMIT_NPROC; now every call gets the folder."""
    need_cgroup("pids")
    for _ in range(50):
        monkeypatch.setattr(cgroups, "_roots", {})
        got: list[object] = []
        barrier = threading.Barrier(4)

        def ask(barrier: threading.Barrier = barrier, got: list[object] = got) -> None:
            barrier.wait()
            got.append(cgroups.root("pids"))

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(isinstance(r, Path) for r in got), got


def test_stale_cgroups_of_dead_processes_are_removed() -> None:
    root = need_cgroup("pids")
    dead = root / f"run-{_dead_pid()}-1-{time.monotonic_ns()}"
    alive = root / f"run-{os.getpid()}-1-{time.monotonic_ns()}"
    dead.mkdir()
    alive.mkdir()
    try:
        cgroups.clean_stale(root)
        assert not dead.exists()
        assert alive.exists()  # a live rsiframe process's cgroup is left alone
    finally:
        for d in (dead, alive):
            if d.exists():
                d.rmdir()


def test_a_run_kills_what_escaped_its_group_and_leaves_no_cgroup(tmp_path: Path) -> None:
    """Under the plain process runner a setsid daemon leaves the process group; the run's
    cgroups still hold it, so it dies with the run, and the cgroups are removed."""
    root = need_cgroup("pids")
    before = {p.name for p in root.iterdir() if p.name.startswith(f"run-{os.getpid()}-")}
    late = tmp_path / "daemon.txt"
    daemon = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    while True:\n"
        f"        open({str(late)!r}, 'a').write('x')\n"
        "        time.sleep(0.05)\n"
        "time.sleep(0.3)\n"
    )
    m = Mount(tmp_path, "/box", writable=True)
    res = ProcessSandbox().run(
        [sys.executable, "-c", daemon],
        mounts=[m],
        cwd=m,
        env={},
        timeout=20,
        limits=Limits(pids=32),
    )
    assert res.ok and res.fallbacks == []
    size = late.stat().st_size
    time.sleep(0.5)
    assert late.stat().st_size == size  # the daemon is dead
    after = {p.name for p in root.iterdir() if p.name.startswith(f"run-{os.getpid()}-")}
    assert after <= before


def test_a_memory_breach_is_named(tmp_path: Path) -> None:
    need_cgroup("memory")
    m = Mount(tmp_path, "/box", writable=True)
    grab = "b = bytearray(300 << 20); import time; time.sleep(30)"
    res = ProcessSandbox().run(
        [sys.executable, "-c", grab],
        mounts=[m],
        cwd=m,
        env={},
        timeout=20,
        limits=Limits(memory_mb=100),
    )
    assert res.limit == "it passed its memory limit of 100 MiB"
    assert not res.timed_out


def test_a_limit_without_a_cgroup_is_said_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cgroups, "_roots", {"pids": "no pids hierarchy (test)"})
    m = Mount(tmp_path, "/box", writable=True)

    def run() -> list[str]:
        res = ProcessSandbox().run(
            ["true"], mounts=[m], cwd=m, env={}, timeout=20, limits=Limits(pids=32)
        )
        return res.fallbacks

    monkeypatch.delenv("RSIFRAME_REQUIRE_BWRAP", raising=False)
    assert run() == [  # the process sandbox sets no RLIMIT_NPROC: nothing holds the limit
        "processes not limited (no pids cgroup: no pids hierarchy (test); RLIMIT_NPROC binds "
        "only a bubblewrap sandbox started by a user other than root)"
    ]
    monkeypatch.setenv("RSIFRAME_REQUIRE_BWRAP", "1")
    with pytest.raises(SandboxError, match="no pids hierarchy"):
        run()


def _members(path: Path) -> list[int]:
    return [int(x) for x in (path / "cgroup.procs").read_text().split()]


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:  # an exited child not reaped yet is gone too
                if f.read().split(") ", 1)[1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


def _writes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("syscw:"):
            return int(line.split()[1])
    raise AssertionError("no syscw in /proc/PID/io")


def test_a_confined_command_starts_the_keeper_in_an_unlimited_cgroup_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first confined command starts the process that keeps cgroup joins fast; it sits
    alone in a ``warm-<pid>-`` cgroup with no limit, beside the commands' cgroups, with
    nothing of its parent's environment (a run driver's marker made a resume end it as the
    killed driver's leftover), and closing it ends it and removes that cgroup."""
    root = need_cgroup("pids")
    cgroups.keeper.close()
    monkeypatch.setenv("RSIFRAME_DRIVER", "a run's driver marker")
    m = Mount(tmp_path, "/box", writable=True)
    res = ProcessSandbox().run(
        ["true"], mounts=[m], cwd=m, env={}, timeout=20, limits=Limits(pids=32)
    )
    assert res.ok
    proc, path = cgroups.keeper.proc, cgroups.keeper.path
    assert proc is not None and path is not None and proc.poll() is None
    assert path.parent == root and path.name.startswith(f"warm-{os.getpid()}-")
    deadline = time.monotonic() + 5
    while _members(path) != [proc.pid] and time.monotonic() < deadline:
        time.sleep(0.01)  # it joins its cgroup itself, right after it starts
    assert _members(path) == [proc.pid]
    assert (path / "pids.max").read_text().strip() == "max"
    assert Path(f"/proc/{proc.pid}/environ").read_bytes() == b""
    # it keeps writing itself into its cgroup (what keeps the join path warm)
    before = _writes(proc.pid)
    time.sleep(0.2)
    assert _writes(proc.pid) - before >= 5
    cgroups.keeper.close()
    assert proc.poll() is not None and not path.exists()
    assert cgroups.keeper.proc is None


def test_the_keeper_ends_after_a_pause_and_the_next_command_starts_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = need_cgroup("pids")
    monkeypatch.setattr(cgroups, "WARM_IDLE_S", 1.0)
    keeper = cgroups.Keeper()
    try:
        keeper.poke(root)
        first, old = keeper.proc, keeper.path
        assert first is not None and old is not None
        for _ in range(15):  # told of commands, it outlives its 1 s pause
            time.sleep(0.1)
            keeper.poke(root)
        assert keeper.proc is first and first.poll() is None
        assert first.wait(timeout=10) == 0  # no command for 1 s: it ends by itself
        keeper.poke(root)
        assert keeper.proc is not None and keeper.proc is not first
        assert not old.exists() and keeper.path is not None and keeper.path.exists()
    finally:
        keeper.close()


def test_the_keeper_ends_with_the_rsiframe_process_that_started_it_even_on_sigkill() -> None:
    root = need_cgroup("pids")
    code = (
        "import os, signal, sys\n"
        "from rsiframe.sandbox import cgroups\n"
        "cgroups.RunCgroups(pids=8)\n"
        "print(cgroups.keeper.proc.pid, cgroups.keeper.path, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == -9, out.stderr
    pid, path = out.stdout.split()
    assert _gone(int(pid))  # its input closed with the killed process: it ended
    # its cgroup, left behind by the SIGKILL, goes with the next rsiframe process's clean-up
    # (another test process may have run it already)
    cgroups.clean_stale(root)
    assert not Path(path).exists()


def test_the_keeper_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    need_cgroup("pids")
    cgroups.keeper.close()
    monkeypatch.setenv("RSIFRAME_CGROUP_WARM", "0")
    made = cgroups.RunCgroups(pids=8)
    try:
        assert made.made and cgroups.keeper.proc is None
    finally:
        made.remove()
