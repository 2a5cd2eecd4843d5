"""Folders set aside to be written over in place, instead of deleted and made anew.

On ext4 without a journal (this machine's disk) every inode freed in the last minute is
skipped, one by one, by each new allocation in its block group, so a run that deletes a
folder per candidate slows every file it makes afterwards. A folder that is no longer
needed but will be needed again in the same shape (a candidate's export, a candidate's
mutation folder) is therefore renamed aside here and renamed back as the next one, whose
writer (:mod:`rsiframe.repo.exportdir`) rewrites only what differs. Beyond ``keep`` spares
a folder goes to the reaper as before.
"""

from __future__ import annotations

import itertools
import os
import stat
import threading
from pathlib import Path

from rsiframe.util import reaper


class Spares:
    """Spare folders kept in ``folder`` as ``.<prefix>-<n>`` (hidden from listings that
    skip dot names), at most ``keep`` at a time."""

    def __init__(self, folder: Path, prefix: str, keep: int) -> None:
        self.folder, self.prefix, self.keep = folder, prefix, keep
        self._free: list[Path] = []
        self._names = itertools.count()
        self._lock = threading.Lock()

    def set_aside(self, path: Path) -> None:
        """``path`` (a folder) is no longer needed: a spare, or to the reaper."""
        with self._lock:
            if len(self._free) < self.keep and _is_folder(path):
                spare = self.folder / f".{self.prefix}-{os.getpid()}-{next(self._names)}"
                try:
                    path.rename(spare)
                except OSError:
                    pass
                else:
                    self._free.append(spare)
                    return
        reaper.discard(path, into=self.folder)

    def take(self, dest: Path) -> bool:
        """Put a spare at ``dest`` if there is one and ``dest`` is absent; True if it did."""
        if os.path.lexists(dest):
            return False
        with self._lock:
            while self._free:
                spare = self._free.pop()
                try:
                    spare.rename(dest)
                except OSError:
                    reaper.discard(spare, into=self.folder)
                    continue
                return True
        return False

    def close(self) -> None:
        """Every spare to the reaper."""
        with self._lock:
            free, self._free = self._free, []
        for spare in free:
            reaper.discard(spare, into=self.folder)


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
