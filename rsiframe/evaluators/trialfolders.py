"""Trial folders, kept per task between its trials: what no sandbox writes is made once.

A trial folder holds what a task's two phases see (``rsiframe.evaluators.local``): the
instruction (``task/``) and the tests (``tests/``), mounted read-only, and the folders the
phases write (:data:`WRITABLE`: ``/app``, the agent's and the verifier's logs, the
verifier's copies). Making every trial's folder anew and deleting it afterwards cost about
twelve directory entries made and twelve freed per trial. On ext4 without a journal (this
machine's disk) every inode freed in the last minute is skipped, one by one, by each new
allocation in its block group, so that churn slowed every file made near it, more so the
longer a run went on.

:class:`TrialFolders` keeps a finished trial's folder for the task's next trial, whole:
``task/instruction.md`` and ``tests/``, and the writable folders, emptied. Nothing in it is
trusted as left:

- the instruction is checked before the agent starts and the tests (:func:`sync_tree`)
  after it has ended, right before the verifier; whatever differs from the task, in
  content, kind, mode, a link or a hard link, is written anew. The verifier therefore sees
  exactly what a fresh copy made after the agent would show it.
- what a trial wrote is deleted in the background, except small files (a reward, a log
  line: :data:`SPENT_FILE`), which wait in ``.spent/`` until the folders close: on this
  disk each file deleted slows every file made near it for a minute or more, and a run
  makes files all the time (docs/performance.md).
- a writable folder is emptied when its trial ends only if every process of the trial is
  known gone (each command's pids cgroup was removed: :attr:`ProcResult.sealed`), else it
  goes to the reaper whole, as an escaped process may still hold it. Before each use
  (:meth:`TrialFolders.fresh`) it must be the very folder made for it (same inode), empty,
  with the owner, mode, size, links, extended attributes (ACLs included), inode flags
  (``chattr``) and project it had when it was made; if anything differs it is replaced
  by a new one.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

from rsiframe.util import fsflags
from rsiframe.util.reaper import discard
from rsiframe.util.safefile import UnsafeFile, read_regular

#: the parts of a trial folder a sandbox writes: every trial gets them empty
WRITABLE = ("app", "logs/agent", "logs/verifier", "verifier-app", "verifier-agent-logs")
#: the small files trials leave (a reward, a log line) are set aside until the folders
#: close rather than deleted at once: each file of at most SPENT_FILE bytes on disk, up to
#: SPENT_FILES of them and SPENT_BYTES in all; beyond that they are deleted as they come
SPENT_FILE, SPENT_FILES, SPENT_BYTES = 64 << 10, 20_000, 64 << 20
#: the largest file :func:`sync_tree` compares rather than copies anew
_CAP = 16 << 20

Entry = tuple[str, str, int, bytes]


class TrialFolders:
    """The trial folders under ``root``: :meth:`take` one for a task, :meth:`fresh` each
    writable folder before a phase writes it, :meth:`give_back` the folder when the trial
    is over, :meth:`close` at the end (all of them go)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._free: dict[str, list[Path]] = {}
        self._made: dict[Path, _Made] = {}  # each writable folder as it was made
        self._spent = self._spent_bytes = 0  # small files set aside until close
        self._lock = threading.Lock()

    def take(self, task_id: str, instruction: str) -> Path:
        """A folder for one trial of ``task_id``, with ``task/instruction.md`` holding
        ``instruction``; its writable folders are absent or empty (:meth:`fresh` them)."""
        with self._lock:
            kept = self._free.get(task_id)
            folder = kept.pop() if kept else None
        if folder is not None and not _reusable(folder):
            self._discard(folder)
            folder = None
        if folder is None:
            folder = self.root / f"trial-{task_id}-{uuid.uuid4().hex[:8]}"
            folder.mkdir(parents=True)
        _write_exactly(folder / "task", "instruction.md", instruction.encode())
        return folder

    def fresh(self, path: Path) -> Path:
        """``path`` (a writable folder of a trial folder) an empty folder as ``mkdir`` makes
        it: the one kept from the task's last trial if it is exactly what was made (see the
        module's text), else a new one."""
        with self._lock:
            made = self._made.get(path)
        if made is not None and _Made.of(path) == made:
            return path
        if os.path.lexists(path):
            discard(path, into=self.root)
        path.mkdir(parents=True)
        made = _Made.of(path)
        if made is not None:
            with self._lock:
                self._made[path] = made
        return path

    def give_back(self, task_id: str, folder: Path, *, sealed: bool = False) -> None:
        """The trial in ``folder`` is over: its writable folders are emptied when
        ``sealed`` (every process of the trial gone), else handed to the reaper whole;
        the folder waits for the task's next trial."""
        try:
            for name in WRITABLE:
                part = folder / name
                if os.path.lexists(part) and not (sealed and self._empty(part)):
                    discard(part, into=self.root)
        except OSError:
            self._discard(folder)
            return
        with self._lock:
            self._free.setdefault(task_id, []).append(folder)

    def close(self) -> None:
        """Hand every kept folder to the reaper."""
        with self._lock:
            folders = [f for kept in self._free.values() for f in kept]
            self._free.clear()
            self._made.clear()
        for folder in [*folders, self.root / ".spent"]:
            discard(folder, into=self.root)

    def _empty(self, part: Path) -> bool:
        """Move what ``part`` holds to the reaper and give it back its mode as made; False
        where it is not the folder made for it."""
        with self._lock:
            made = self._made.get(part)
        st = os.lstat(part)
        if made is None or not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != made.ino:
            return False  # not the folder made for it (a link, or another folder put there)
        for name in os.listdir(part):
            self._drop(part / name)
        if stat.S_IMODE(st.st_mode) != made.mode:
            os.chmod(part, made.mode, follow_symlinks=False)
        return True

    def _drop(self, path: Path) -> None:
        """What a trial left in a writable folder: a small plain file is set aside in
        ``.spent/`` until :meth:`close` (:data:`SPENT_FILES`, :data:`SPENT_BYTES`), the
        rest goes to the reaper now."""
        st = os.lstat(path)
        size = st.st_blocks * 512
        with self._lock:
            keep = stat.S_ISREG(st.st_mode) and size <= SPENT_FILE
            keep = keep and self._spent < SPENT_FILES and self._spent_bytes + size <= SPENT_BYTES
            if keep:
                self._spent += 1
                self._spent_bytes += size
                aside = self.root / ".spent" / str(self._spent)
        if not keep:
            discard(path, into=self.root)
            return
        aside.parent.mkdir(exist_ok=True)
        try:
            path.rename(aside)
        except OSError:
            discard(path, into=self.root)

    def _discard(self, folder: Path) -> None:
        with self._lock:
            for name in WRITABLE:
                self._made.pop(folder / name, None)
        discard(folder, into=self.root)


@dataclass(frozen=True)
class _Made:
    """What a writable folder's reuse is checked against: all a new ``mkdir`` decides that
    the sandboxed agent could change and emptying would not undo."""

    ino: tuple[int, int]
    owner: tuple[int, int]
    mode: int
    nlink: int
    size: int
    empty: bool
    xattrs: tuple[tuple[str, bytes], ...]
    flags: bytes | None
    fsx: bytes | None

    @classmethod
    def of(cls, path: Path) -> _Made | None:
        """``path``'s record; None where it is not a folder (a link included)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            names = sorted(os.listxattr(fd))
            return cls(
                ino=(st.st_dev, st.st_ino),
                owner=(st.st_uid, st.st_gid),
                mode=stat.S_IMODE(st.st_mode),
                nlink=st.st_nlink,
                size=st.st_size,
                empty=not os.listdir(fd),
                xattrs=tuple((n, os.getxattr(fd, n)) for n in names),
                flags=fsflags.query(fd, fsflags.GETFLAGS, 8),
                fsx=_fsx(fd),
            )
        except OSError:
            return None
        finally:
            os.close(fd)


def _fsx(fd: int) -> bytes | None:
    """``struct fsxattr`` less its extent count (which a folder's size already covers)."""
    got = fsflags.query(fd, fsflags.FSGETXATTR, 28)
    return None if got is None else got[:8] + got[12:]


#: what a kept folder may hold, folder by folder (anything else, and it is not reused)
_KEPT = {
    "": {"task", "tests", "logs", "app", "verifier-app", "verifier-agent-logs"},
    "logs": {"agent", "verifier"},
    "task": {"instruction.md"},
}


def _reusable(folder: Path) -> bool:
    """A real folder holding nothing but what is kept (:data:`_KEPT`): nothing a
    process-sandbox agent left beside it for the next trial to find (the writable folders
    are checked when used: :meth:`TrialFolders.fresh`)."""
    for sub, allowed in _KEPT.items():
        path = folder / sub if sub else folder
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode) or not set(os.listdir(path)) <= allowed:
                return False
        except FileNotFoundError:
            if not sub:
                return False
        except OSError:
            return False
    return True


def _write_exactly(parent: Path, name: str, data: bytes) -> None:
    """``parent/name`` a plain file (one link) holding ``data``; written only if it is not."""
    parent.mkdir(exist_ok=True)
    path = parent / name
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if _holds(path, st, data):
            return
        _remove(path)
    path.write_bytes(data)


def _holds(path: Path, st: os.stat_result, data: bytes) -> bool:
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size != len(data):
        return False
    try:
        return read_regular(path, cap=len(data) + 1) == data
    except UnsafeFile:
        return False


def _remove(path: Path) -> None:
    if stat.S_ISDIR(os.lstat(path).st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


def sync_tree(src: Path, dst: Path) -> None:
    """Make ``dst`` what ``shutil.copytree(src, dst, symlinks=True)`` makes, unless it is
    exactly that already: the same names, kinds, permission bits, file contents and link
    targets, each file with one link."""
    want = manifest(src)
    if want is not None and manifest(dst, own=True) == want:
        return
    if os.path.lexists(dst):
        _remove(dst)
    shutil.copytree(src, dst, symlinks=True)


def manifest(root: Path, *, own: bool = False) -> list[Entry] | None:
    """What ``root`` holds, sorted (path, kind, mode, content or link target); None where it
    is not a real folder or holds what a copy would not (``own``: a file with more than
    one link, a FIFO, a socket, a device) or a file over the compared size."""
    try:
        st = os.lstat(root)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    out: list[Entry] = [("", "d", stat.S_IMODE(st.st_mode), b"")]
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(root / rel if rel else root) as it:
                entries = list(it)
        except OSError:
            return None
        for e in entries:
            entry = _entry(e, f"{rel}/{e.name}" if rel else e.name, own)
            if entry is None:
                return None
            if entry[1] == "d":
                stack.append(entry[0])
            out.append(entry)
    return sorted(out)


def _entry(e: os.DirEntry[str], rel: str, own: bool) -> Entry | None:
    try:
        st = e.stat(follow_symlinks=False)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            return (rel, "d", mode, b"")
        if stat.S_ISLNK(st.st_mode):
            return (rel, "l", 0, os.readlink(e.path).encode())
        if not stat.S_ISREG(st.st_mode) or st.st_size > _CAP or (own and st.st_nlink != 1):
            return None
        return (rel, "f", mode, read_regular(e.path, cap=_CAP))
    except OSError:  # UnsafeFile included: swapped for a link or a FIFO meanwhile
        return None
