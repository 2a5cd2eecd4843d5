"""Inode flags (what ``chattr`` and ``lsattr`` show), through their ``ioctl`` calls.

Used to check that a kept folder carries no flag it did not have when made
(:mod:`rsiframe.evaluators.trialfolders`) and to mark a run folder as the top of a
directory hierarchy (:func:`mark_top`).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

#: ``FS_IOC_GETFLAGS``, ``FS_IOC_SETFLAGS`` and ``FS_IOC_FSGETXATTR`` (``linux/fs.h``)
GETFLAGS, SETFLAGS, FSGETXATTR = 0x80086601, 0x40086602, 0x801C581F
#: ``FS_TOPDIR_FL`` (``chattr +T``): the top of a directory hierarchy
TOPDIR = 0x00020000


def query(fd: int, request: int, size: int) -> bytes | None:
    """The ``size`` bytes an ``ioctl`` read returns; None where the file system has none
    (the same for every file on it)."""
    try:
        return fcntl.ioctl(fd, request, bytes(size))
    except OSError:
        return None


def mark_top(folder: Path) -> bool:
    """Mark ``folder`` the top of a directory hierarchy (ext4's ``T`` attribute): ext4 then
    places each folder made directly in it in a block group of its own choosing, as for a
    folder of the file system's root, rather than beside ``folder``. On ext4 without a
    journal every inode freed in the last minutes slows each new one in its block group
    (docs/performance.md), so a run whose folder sits beside another program's churn keeps
    its own files away from it. False where the file system has no such flag."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        got = query(fd, GETFLAGS, 8)
        if got is None:
            return False
        flags = int.from_bytes(got[:4], "little")
        fcntl.ioctl(fd, SETFLAGS, (flags | TOPDIR).to_bytes(8, "little"))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
