"""The verifier's own copy of a trial's ``/app``: what the agent left, and nothing it links to.

After the agent phase (and every process it started) has ended, the evaluator copies
the agent's ``/app`` into a fresh folder that no agent process ever had mounted; the
verifier phase gets only that copy. The copy walks the agent's folder by directory file
descriptors without following links, so nothing the agent (or a process it left behind)
does during the copy can redirect it:

- regular files are copied by content (opened as :mod:`rsiframe.util.safefile` opens them),
  which also breaks hard links to files elsewhere; the executable bit is kept,
  set-uid/set-gid bits are not;
- a symlink is kept only when it resolves inside ``/app`` (through the tree's other
  links, as the kernel would); one that leaves it (``/tests/...``, ``../tests/...``,
  ``/logs/verifier``, a host path) is dropped;
- FIFOs, sockets and devices are dropped;
- past ``max_bytes`` (or ``max_files``) the copy stops: the task ends with that reason.

Every dropped entry comes back as a :class:`Removed` for the trial's evidence.

Standard library only, importing nothing of rsiframe (its one file check is
:mod:`rsiframe.util.safefile`'s rule, spelled out in :func:`_open_regular`): the file is
staged beside Harbor's plug-ins (:mod:`rsiframe.evaluators.harbor.venv`), where the
``bwrap`` environment makes the same copy for Harbor's verifier phase.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

#: the path the agent and the verifier see the copied folder at
INSIDE = "/app"
_MAX_HOPS = 40


@dataclass(frozen=True)
class Removed:
    path: str  # relative to /app
    reason: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


class AppTooLarge(Exception):
    """The agent's /app is past the task's limit; the message says by how much."""


class _Swapped(OSError):
    """A file listed as regular was something else when opened (a link, a FIFO, ...)."""


def _open_regular(name: str, dir_fd: int) -> int:
    """``name`` opened for reading only if it is a regular file: never through a link
    (``O_NOFOLLOW``), never blocking on a FIFO (``O_NONBLOCK``), checked with ``fstat``."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Swapped(f"{name} is a symlink") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _Swapped(f"{name} is not a regular file")
    return fd


def resolves_inside(rel: str, links: dict[str, str], inside: str = INSIDE) -> bool:
    """Whether the link at ``rel`` (relative to the app root) resolves inside the root,
    following the other ``links`` of the tree (``{relative path: target}``); ``inside`` is
    where the root is seen (absolute targets under it stay inside)."""
    return _LinkWalk(links, inside).walk(rel.split("/")[:-1], links[rel]) is not None


class _LinkWalk:
    """Follows a link's target through the tree's other links, component by component;
    None as soon as it leaves the root (or loops past ``_MAX_HOPS``)."""

    def __init__(self, links: dict[str, str], inside: str) -> None:
        self.links, self.inside, self.hops = links, inside, 0

    def walk(self, start: list[str], target: str) -> list[str] | None:
        if target.startswith("/"):
            if target != self.inside and not target.startswith(self.inside + "/"):
                return None
            start, target = [], target[len(self.inside) :].lstrip("/")
        parts: list[str] | None = list(start)
        for comp in target.split("/"):
            if parts is None:
                return None
            parts = self._step(parts, comp)
        return parts

    def _step(self, parts: list[str], comp: str) -> list[str] | None:
        if comp in ("", "."):
            return parts
        if comp == "..":
            return parts[:-1] if parts else None
        parts = [*parts, comp]
        joined = "/".join(parts)
        if joined not in self.links:
            return parts
        self.hops += 1
        if self.hops > _MAX_HOPS:
            return None
        return self.walk(parts[:-1], self.links[joined])


def freeze(
    src: Path, dst: Path, *, max_bytes: int, max_files: int = 100_000, inside: str = INSIDE
) -> list[Removed]:
    """Copy ``src`` (seen at ``inside``) into ``dst`` (a new folder, or an empty one) as
    described above; the entries dropped."""
    removed: list[Removed] = []
    links: dict[str, str] = {}
    total = files = 0
    dst.mkdir(parents=True, exist_ok=True)
    if os.listdir(dst):
        raise ValueError(f"{dst} is not empty")
    for dirpath, dirnames, filenames, dfd in os.fwalk(src, follow_symlinks=False):
        rel_dir = os.path.relpath(dirpath, src)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        out_dir = dst / rel_dir
        for name in sorted(dirnames):
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            rel = posixpath.join(rel_dir, name)
            if stat.S_ISLNK(st.st_mode):  # fwalk lists links to folders as folders
                links[rel] = os.readlink(name, dir_fd=dfd)
            else:
                (out_dir / name).mkdir(mode=0o755)
        dirnames[:] = [d for d in dirnames if posixpath.join(rel_dir, d) not in links]
        for name in sorted(filenames):
            rel = posixpath.join(rel_dir, name)
            files += 1
            if files > max_files:
                raise AppTooLarge(f"/app holds more than {max_files} files")
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                links[rel] = os.readlink(name, dir_fd=dfd)
                continue
            if not stat.S_ISREG(st.st_mode):
                removed.append(Removed(rel, f"not a regular file (mode {st.st_mode:o})"))
                continue
            try:
                fd = _open_regular(name, dfd)
            except _Swapped as exc:  # swapped for something else during the copy
                removed.append(Removed(rel, f"changed during the copy: {exc}"))
                continue
            except OSError as exc:  # gone, or made unreadable by the agent
                removed.append(Removed(rel, f"unreadable: {exc.strerror}"))
                continue
            try:
                total = _copy(fd, out_dir / name, total, max_bytes)
            finally:
                os.close(fd)
            # the agent's permission bits are part of its answer (a task may ask for a private
            # file); set-uid, set-gid and sticky bits are dropped
            os.chmod(out_dir / name, stat.S_IMODE(st.st_mode) & 0o777)
    for rel in sorted(links):
        target = links[rel]
        if resolves_inside(rel, links, inside):
            os.symlink(target, dst / rel)
        else:
            removed.append(Removed(rel, f"symlink leaves {inside} (-> {target})"))
    return removed


def _copy(fd: int, out: Path, total: int, max_bytes: int) -> int:
    with open(out, "xb") as f:
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > max_bytes:
                raise AppTooLarge(f"/app grew past {max_bytes >> 20} MiB")
            f.write(chunk)
    return total
