"""Processes as ``/proc`` shows them: alive or gone, and which ones a driver left behind.

A driver killed with SIGKILL can leave processes behind for a moment (its gateway finishing
a paid call, a sandbox still exiting). :func:`leftovers` finds them without guessing by
name or path (an editor or a viewer of the run folder is no leftover): a process of this
user whose environment carries the marker the driver handed every process it started, or
that holds a given lock file open. This process and its ancestors are never among them.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str  # its command line, shortened
    holds: str | None = None  # the lock file it holds open, if any

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command})"


#: SIGKILL's bit in /proc/PID/status's pending-signal masks
_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def alive(pid: int | None) -> bool:
    """Whether ``pid`` is a process that is neither dead (a zombie is) nor dying (SIGKILL
    pending: the kernel is still tearing it down)."""
    if pid is None or pid <= 0:
        return False
    try:
        status = (PROC / str(pid) / "status").read_text()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if fields.get("State", "").strip()[:1] in ("Z", "X", ""):
        return False
    pending = 0
    for key in ("SigPnd", "ShdPnd"):
        with contextlib.suppress(ValueError):
            pending |= int(fields.get(key, "0").strip() or "0", 16)
    return not pending & _SIGKILL_BIT


def command(pid: int, width: int = 80) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"
    return text if len(text) <= width else text[: width - 1] + "…"


def _ancestors() -> set[int]:
    out, pid = {os.getpid()}, os.getppid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            stat = (PROC / str(pid) / "stat").read_text()
            pid = int(stat[stat.rfind(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def _own_pids() -> Iterator[int]:
    uid = os.getuid()
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    yield int(entry.name)


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _holds(pid: int, path: str) -> bool:
    with contextlib.suppress(OSError):
        for fd in (PROC / str(pid) / "fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == path:
                    return True
    return False


def leftovers(name: str, value: str, lock: Path) -> list[Leftover]:
    """Processes of this user (not this one, not its ancestors) whose environment sets
    ``name`` to ``value`` (what a driver hands every process it starts), or that hold
    ``lock`` open (``holds``: its name)."""
    mine = _ancestors()
    held = str(lock.resolve())
    found = []
    for pid in _own_pids():
        if pid in mine:
            continue
        holds = lock.name if _holds(pid, held) else None
        if (holds or _environ(pid).get(name) == value) and alive(pid):
            found.append(Leftover(pid, command(pid), holds))
    return found


def end(pids: list[int]) -> None:
    """SIGKILL each process (and its process group when it leads one)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
                continue
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
