"""The cgroups of one sandboxed run: a pids and a memory cgroup (cgroup v1) per run.

:class:`RunCgroups` makes, for one :meth:`rsiframe.sandbox.bwrap.Sandbox.run`, a cgroup in
each hierarchy a limit needs (``pids``: processes at once; ``memory``: the memory of all
its processes together), under ``<the cgroup rsiframe is in>/rsiframe/`` of that
hierarchy. The command joins them before anything else starts; the kernel then counts a
fork refused at the limit (``pids.events``) and a process killed at the memory limit
(``memory.oom_control``), which :meth:`RunCgroups.breach` names so the run ends with
the reason. Removal is certain: every process left in a run's cgroup is killed, and the
cgroup is removed once the last one is gone; cgroups left by an rsiframe process that no
longer exists (SIGKILL, a power cut) are removed when the next one first makes its own.

Joining is kept fast by :class:`Keeper` (``cgroupwarm.py``): while commands start, one
small process per rsiframe process keeps the kernel's join path warm, so a join costs
about 0.1 ms where it cost an RCU grace period (6-15 ms) after every pause.

A limit no cgroup can hold is not dropped silently: :attr:`RunCgroups.missing` says why,
the sandbox falls back to the per-process rlimit and records that in its result, and
:func:`required` (``RSIFRAME_REQUIRE_BWRAP=1``, as in CI) makes it an error instead.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from rsiframe.errors import SandboxError

V1 = Path("/sys/fs/cgroup")
#: how long :meth:`RunCgroups.remove` keeps killing and retrying before it leaves the
#: cgroup to the next start's clean-up
REMOVE_WITHIN_S = 30.0
_NAME = re.compile(r"^(?:run|probe|warm)-(\d+)-")
#: the keeper's script, and how long it outlasts the last command it was told of
WARM_SCRIPT = Path(__file__).with_name("cgroupwarm.py")
WARM_IDLE_S = 5.0

_lock = threading.Lock()
#: controller -> the folder its run cgroups go in, or why there is none (found once)
_roots: dict[str, Path | str] = {}


def required() -> bool:
    """True when a limit that no cgroup can hold must fail the run (CI sets this)."""
    return os.environ.get("RSIFRAME_REQUIRE_BWRAP", "") not in ("", "0")


def warm_wanted() -> bool:
    """False where ``RSIFRAME_CGROUP_WARM=0`` turns :class:`Keeper` off (to measure it)."""
    return os.environ.get("RSIFRAME_CGROUP_WARM", "1") != "0"


def _own(controller: str) -> str:
    for row in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = row.split(":", 2)
        if controller in names.split(","):
            return path
    raise OSError(f"this host has no cgroup v1 {controller} hierarchy")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_members(path: Path) -> int:
    """SIGKILL every process in the cgroup at ``path``; how many were listed."""
    try:
        pids = [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def clean_stale(base: Path) -> int:
    """Remove the run cgroups under ``base`` whose rsiframe process is gone (killing what
    is still in them); how many were removed."""
    removed = 0
    with contextlib.suppress(OSError):
        for d in base.iterdir():
            m = _NAME.match(d.name)
            if not d.is_dir() or m is None or _alive(int(m.group(1))):
                continue
            _kill_members(d)
            with contextlib.suppress(OSError):
                d.rmdir()
                removed += 1
    return removed


def _probe(controller: str) -> Path:
    base = V1 / controller / _own(controller).lstrip("/") / "rsiframe"
    base.mkdir(exist_ok=True)
    clean_stale(base)
    # a name of its own: two threads (or processes) probing at once must not collide
    probe = base / f"probe-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
    probe.mkdir()
    try:
        knob = "pids.max" if controller == "pids" else "memory.limit_in_bytes"
        (probe / knob).write_text("8" if controller == "pids" else str(64 << 20))
    finally:
        probe.rmdir()
    return base


def root(controller: str) -> Path | str:
    """The folder run cgroups of ``controller`` go in, or why this host has none. Found
    once per process, under a lock (threads asking at once get the same answer)."""
    with _lock:
        if controller not in _roots:
            try:
                _roots[controller] = _probe(controller)
            except OSError as exc:
                why = exc.strerror or str(exc)
                _roots[controller] = f"{why} ({exc.filename})" if exc.filename else why
        return _roots[controller]


class RunCgroups:
    """The cgroups of one run, made in the constructor: ``pids`` processes at once and
    ``memory_mb`` MiB for all processes together (either may be None: not limited)."""

    def __init__(self, *, pids: int | None = None, memory_mb: int | None = None) -> None:
        self.pids, self.memory_mb = pids, memory_mb
        #: controller -> its cgroup for this run
        self.made: dict[str, Path] = {}
        #: controller -> why it holds no cgroup (the limit falls back to an rlimit)
        self.missing: dict[str, str] = {}
        name = f"run-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
        wanted = {"pids": pids, "memory": memory_mb}
        for controller, limit in wanted.items():
            if limit is None:
                continue
            base = root(controller)
            if isinstance(base, str):
                self.missing[controller] = base
                continue
            path = base / name
            try:
                path.mkdir()
                try:
                    if controller == "pids":
                        (path / "pids.max").write_text(str(int(limit)))
                    else:
                        (path / "memory.limit_in_bytes").write_text(str(int(limit) << 20))
                        with contextlib.suppress(OSError):  # swap too, where the host has it
                            (path / "memory.memsw.limit_in_bytes").write_text(str(int(limit) << 20))
                except OSError:
                    path.rmdir()
                    raise
            except OSError as exc:
                self.missing[controller] = f"cannot make {path}: {exc.strerror or exc}"
                continue
            self.made[controller] = path
        if self.made and warm_wanted():
            keeper.poke(next(iter(self.made.values())).parent)
        if self.missing and required():
            self.remove()
            raise SandboxError(
                "RSIFRAME_REQUIRE_BWRAP is set and a limit has no cgroup to hold it: "
                + "; ".join(f"{c}: {why}" for c, why in sorted(self.missing.items()))
            )

    def fallbacks(self, *, nproc_binds: bool = True) -> list[str]:
        """Each limit held only by a per-process rlimit (or by nothing: ``nproc_binds``
        False, where RLIMIT_NPROC cannot bind), and why, in words."""
        pids = (
            "processes limited by RLIMIT_NPROC only (no pids cgroup: {})"
            if nproc_binds
            else "processes not limited (no pids cgroup: {}; RLIMIT_NPROC binds only a "
            "bubblewrap sandbox started by a user other than root)"
        )
        words = {
            "pids": pids,
            "memory": "memory limited per process by RLIMIT_AS only (no memory cgroup: {})",
        }
        return [words[c].format(why) for c, why in sorted(self.missing.items())]

    def joins(self) -> list[Path]:
        """The ``cgroup.procs`` files a command writes itself into, before anything else
        runs, to join the run's cgroups (:func:`rsiframe.sandbox.bwrap.limits_step`)."""
        return [p / "cgroup.procs" for p in self.made.values()]

    def breach(self) -> str | None:
        """The limit the run has reached, in words, or None."""
        path = self.made.get("pids")
        if path is not None and _counter(path / "pids.events", "max") > 0:
            return f"it reached its limit of {self.pids} processes"
        path = self.made.get("memory")
        if path is not None and _counter(path / "memory.oom_control", "oom_kill") > 0:
            return f"it passed its memory limit of {self.memory_mb} MiB"
        return None

    def kill(self) -> None:
        """SIGKILL every process still in the run's cgroups."""
        for path in self.made.values():
            _kill_members(path)

    def remove(self) -> bool:
        """Kill what is left, wait until the last process is gone, remove the cgroups; False
        if one is still busy after :data:`REMOVE_WITHIN_S` (the next start removes it)."""
        deadline = time.monotonic() + REMOVE_WITHIN_S
        pause = 0.01
        for controller, path in list(self.made.items()):
            while True:
                _kill_members(path)
                try:
                    path.rmdir()
                except FileNotFoundError:
                    pass
                except OSError:
                    if time.monotonic() < deadline:
                        time.sleep(pause)
                        pause = min(pause * 2, 0.5)
                        continue
                    return False
                del self.made[controller]
                break
        return True


def _counter(path: Path, key: str) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    return 0


class Keeper:
    """Starts and tells the process that keeps cgroup joins fast (``cgroupwarm.py``): one
    per rsiframe process, in a cgroup of its own (``warm-<pid>-…``, no limit on it), started
    by the first command after a pause and gone :data:`WARM_IDLE_S` after the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.path: Path | None = None

    def poke(self, base: Path) -> None:
        """A command is about to join a cgroup under ``base``: keep the path warm."""
        with self._lock:
            if self.proc is not None and self.proc.poll() is None:
                assert self.proc.stdin is not None
                # a full pipe (the keeper behind on reading) is told enough already
                with contextlib.suppress(OSError):
                    os.write(self.proc.stdin.fileno(), b".")
                return
            self._end()
            self._start(base)

    def _start(self, base: Path) -> None:
        path = base / f"warm-{os.getpid()}-{time.monotonic_ns()}"
        try:
            path.mkdir()
        except OSError:
            return  # joins stay correct, only slower
        argv = [sys.executable, "-I", "-S", str(WARM_SCRIPT), str(path / "cgroup.procs")]
        try:
            proc = subprocess.Popen(
                [*argv, str(WARM_IDLE_S)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                # nothing of the caller's environment: not a run's driver marker (a resume
                # would take it for work the killed driver left), not a key
                env={},
                start_new_session=True,  # a Ctrl-C is the rsiframe process's, not its
            )
        except OSError:
            path.rmdir()
            return
        assert proc.stdin is not None
        os.set_blocking(proc.stdin.fileno(), False)
        self.proc, self.path = proc, path

    def _end(self) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # end of input: the keeper ends at once
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.rmdir()
            self.path = None

    def close(self) -> None:
        """End the keeper and remove its cgroup (at exit)."""
        with self._lock:
            self._end()


keeper = Keeper()
atexit.register(keeper.close)
