"""Folders removed off the critical path.

Deleting a folder costs a syscall per entry, and on a filesystem mounted with online
discard (this machine's ext4) each unlink waits for the device: deleting a finished
trial's folder cost milliseconds on the path of every evaluation. :func:`discard`
renames the folder aside at once (atomic; the name is free again when it returns) and
one daemon thread deletes it. :func:`settle` waits until everything handed over is gone
(a run's close). Whatever a killed process leaves aside is under its run's ``work/``
folder, which the next close removes.
"""

from __future__ import annotations

import itertools
import os
import queue
import shutil
import stat
import threading
from pathlib import Path

_queue: queue.SimpleQueue[Path] = queue.SimpleQueue()
_cond = threading.Condition()
_pending = 0
_thread: threading.Thread | None = None
_names = itertools.count()


def discard(path: Path, *, into: Path | None = None) -> None:
    """Remove ``path`` (a folder or a file; a missing one is fine) in the background; it is renamed
    aside in ``into`` (a folder on the same filesystem), else beside itself."""
    global _pending, _thread
    aside = (into or path.parent) / f".discard-{os.getpid()}-{next(_names)}-{path.name}"
    try:
        path.rename(aside)
    except FileNotFoundError:
        return
    except OSError:  # cannot rename (another filesystem, permissions): remove it here
        shutil.rmtree(path, ignore_errors=True)
        return
    with _cond:
        _pending += 1
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="rsi-reaper", daemon=True)
            _thread.start()
    _queue.put(aside)


def _run() -> None:
    global _pending
    while True:
        _remove(_queue.get())
        with _cond:
            _pending -= 1
            _cond.notify_all()


def _remove(path: Path) -> None:
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
    except OSError:
        pass


def settle(timeout: float | None = None) -> bool:
    """Wait until every discarded folder is gone; False if ``timeout`` passed first."""
    with _cond:
        return _cond.wait_for(lambda: _pending == 0, timeout)
