"""Host-side reads of files a candidate produced: regular files only, never a link, capped.

A candidate controls what lands in its work folders, trial folders and build outputs.
Whatever the host reads from there goes through :func:`read_regular` (or
:func:`open_regular`): the file is opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO cannot
block the open, a symlink cannot redirect it), ``fstat`` must say it is a regular file
(no FIFO, device or socket), and at most ``cap`` bytes are read, or :class:`UnsafeFile`
is raised, naming why. A leaf: it imports nothing of rsiframe.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: the default cap on one file read back from a candidate's folder
DEFAULT_CAP = 64 << 20


class UnsafeFile(OSError):
    """A candidate-produced path that is not a plain readable file within its size cap."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path | str, *, dir_fd: int | None = None) -> int:
    """An fd open for reading on ``path``, which must be a regular file and not a link."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == 40:  # ELOOP: the last component is a symlink
            raise UnsafeFile(exc.errno, f"{path} is a symlink") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafeFile(f"{path} is {_kind(st.st_mode)}, not a regular file")
    return fd


def read_fd(fd: int, cap: int, name: str) -> bytes:
    """Up to ``cap`` bytes of an open regular file; :class:`UnsafeFile` if it is larger."""
    size = os.fstat(fd).st_size
    if size > cap:
        raise UnsafeFile(f"{name} is {size} bytes, over the {cap}-byte limit")
    chunks, left = [], cap + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > cap:  # it grew while we read
        raise UnsafeFile(f"{name} grew past the {cap}-byte limit")
    return data


def read_regular(path: Path | str, cap: int = DEFAULT_CAP, *, dir_fd: int | None = None) -> bytes:
    """The bytes of a candidate-produced regular file (see the module docstring)."""
    fd = open_regular(path, dir_fd=dir_fd)
    try:
        return read_fd(fd, cap, str(path))
    finally:
        os.close(fd)


def read_text(path: Path | str, cap: int = DEFAULT_CAP) -> str:
    """:func:`read_regular`, decoded as UTF-8 (:class:`UnicodeDecodeError` if it is not)."""
    return read_regular(path, cap).decode()


def is_regular(path: Path | str) -> bool:
    """True when ``path`` itself (not what a link names) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
