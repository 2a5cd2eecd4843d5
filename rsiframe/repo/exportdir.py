"""A commit's tree (or a verified export) written into a folder, in place: what matches stays.

:meth:`CandidateRepo.export <rsiframe.repo.candidates.CandidateRepo.export>` writes a
commit's tree into a folder that may hold an older export (a recycled one: see
:meth:`~rsiframe.repo.candidates.CandidateRepo.verified_export`). Making every export in a
new folder and deleting the old one cost two or more inodes made and freed per candidate;
on ext4 without a journal (this machine's disk) every inode freed in the last minute slows
each new one near it. Here a file that is a plain file with one link is rewritten in place
(or left alone where it already holds the bytes), a link whose target differs is made
again, and whatever the tree does not hold, or holds as another kind, is removed first;
nothing is written through a link. The caller still hashes the result against the commit's
tree, as for a new folder. :func:`copy_into` does the same from a verified export, for a
candidate's mutation folder (:mod:`rsiframe.engine.transaction`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from rsiframe.repo.gittree import MODE_EXEC, MODE_FILE, MODE_GITLINK, MODE_LINK


class GitlinkInTree(Exception):
    """The tree holds a gitlink (a submodule), which no folder can show."""


#: every folder written: what ``mkdir`` makes under the usual umask, whatever was there
FOLDER_MODE = 0o755


def write_tree(
    dest: Path,
    modes: dict[str, str],
    read: Callable[[str], bytes],
    folders: Iterable[str] = (),
) -> None:
    """Make ``dest`` hold exactly ``modes`` (path: git mode; ``read(path)``: its bytes, a
    link's target) and ``folders`` (empty ones too), every folder :data:`FOLDER_MODE`."""
    if os.path.lexists(dest) and not stat.S_ISDIR(os.lstat(dest).st_mode):
        dest.unlink()
    dest.mkdir(parents=True, exist_ok=True)
    dirs = {p for path in modes for p in _parents(path)} | set(folders)
    _prune(dest, "", modes, dirs)
    for rel in ["", *sorted(dirs)]:
        _put_folder(dest / rel if rel else dest)
    for path, mode in modes.items():
        if mode == MODE_GITLINK:
            raise GitlinkInTree(path)
        target = dest / path
        if mode == MODE_LINK:
            _put_link(target, os.fsdecode(read(path)))
        else:
            _put_file(target, read(path), 0o755 if mode == MODE_EXEC else 0o644)


def copy_into(src: Path, dest: Path) -> None:
    """Make ``dest`` what ``shutil.copytree(src, dest, symlinks=True)`` makes of ``src`` (a
    verified export: folders, plain and executable files, links), in place."""
    modes: dict[str, str] = {}
    folders: list[str] = []
    _scan(src, "", modes, folders)

    def read(path: str) -> bytes:
        if modes[path] == MODE_LINK:
            return os.fsencode(os.readlink(src / path))
        return (src / path).read_bytes()

    write_tree(dest, modes, read, folders)


def _scan(root: Path, rel: str, modes: dict[str, str], folders: list[str]) -> None:
    with os.scandir(root / rel if rel else root) as it:
        children = list(it)
    for child in children:
        path = f"{rel}/{child.name}" if rel else child.name
        st = child.stat(follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            folders.append(path)
            _scan(root, path, modes, folders)
        elif stat.S_ISLNK(st.st_mode):
            modes[path] = MODE_LINK
        elif stat.S_ISREG(st.st_mode):
            modes[path] = MODE_EXEC if st.st_mode & stat.S_IXUSR else MODE_FILE
        else:
            raise OSError(f"{root / path} is neither a folder, a file nor a link")


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _prune(root: Path, rel: str, modes: dict[str, str], dirs: set[str]) -> None:
    """Remove under ``root/rel`` what ``modes`` does not hold as that kind: a file must be
    a plain file with one link, a link a link, a folder a real folder."""
    with os.scandir(root / rel if rel else root) as it:
        children = list(it)
    for child in children:
        path = f"{rel}/{child.name}" if rel else child.name
        st = child.stat(follow_symlinks=False)
        mode = modes.get(path)
        if path in dirs and stat.S_ISDIR(st.st_mode):
            _prune(root, path, modes, dirs)
        elif mode is not None and _same_kind(mode, st):
            continue
        elif stat.S_ISDIR(st.st_mode):
            shutil.rmtree(child.path)
        else:
            os.unlink(child.path)


def _put_folder(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        path.mkdir()
    if stat.S_IMODE(os.lstat(path).st_mode) != FOLDER_MODE:
        os.chmod(path, FOLDER_MODE, follow_symlinks=False)


def _same_kind(mode: str, st: os.stat_result) -> bool:
    if mode == MODE_LINK:
        return stat.S_ISLNK(st.st_mode)
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def _put_link(target: Path, to: str) -> None:
    if os.path.islink(target):
        if os.readlink(target) == to:
            return
        target.unlink()
    os.symlink(to, target)


def _put_file(target: Path, data: bytes, mode: int) -> None:
    """``target`` (absent, or a plain file with one link) holding ``data`` with ``mode``."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(target, flags)
    except FileNotFoundError:
        fd = os.open(target, flags | os.O_CREAT | os.O_EXCL, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise OSError(f"{target} is not a plain file with one link")
        if st.st_size != len(data) or _read(fd, st.st_size) != data:
            os.ftruncate(fd, 0)
            view, offset = memoryview(data), 0
            while offset < len(data):
                offset += os.pwrite(fd, view[offset:], offset)
        if stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _read(fd: int, size: int) -> bytes:
    chunks, offset = [], 0
    while offset < size:
        chunk = os.pread(fd, min(size - offset, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
