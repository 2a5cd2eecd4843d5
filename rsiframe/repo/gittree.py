"""Git trees computed in pure Python: snapshot a folder, hash it, diff two flat trees.

This module never calls git, so the evaluator can check an exported folder
against a commit's tree hash independently of the tool that wrote it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rsiframe.surface import glob_matches
from rsiframe.util.safefile import UnsafeFile, open_regular, read_regular

#: the largest file a candidate tree may hold (read back only as a regular file)
MAX_BLOB = 1 << 31

MODE_FILE = "100644"
MODE_EXEC = "100755"
MODE_LINK = "120000"
MODE_GITLINK = "160000"
MODE_TREE = "40000"

#: Paths never taken into a candidate tree (caches a validate command may leave behind).
DEFAULT_IGNORE = ("**/__pycache__/", "**/*.pyc", "**/.pytest_cache/", "**/.DS_Store")


@dataclass(frozen=True)
class Entry:
    """One leaf of a tree: a file, an executable, a symlink or a gitlink."""

    mode: str
    sha: str


FlatTree = dict[str, Entry]


@dataclass
class Snapshot:
    """A folder read as a git tree, plus what could not be represented in one."""

    root: Path
    entries: FlatTree = field(default_factory=dict)
    #: things found on disk that a candidate tree may not contain (.git, fifos, ...)
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def tree_sha(self) -> str:
        return tree_hash(self.entries)

    def content(self, path: str) -> bytes:
        entry = self.entries[path]
        full = self.root / path
        if entry.mode == MODE_LINK:
            return os.fsencode(os.readlink(full))
        return read_regular(full, MAX_BLOB)


def object_header(kind: bytes, size: int) -> bytes:
    """What git puts before an object's data, to hash and to store: ``<kind> <size>`` and NUL."""
    return kind + b" %d\0" % size


def object_sha(kind: bytes, data: bytes) -> str:
    """The git object id of ``data`` as a ``kind`` object (``blob``, ``tree``, ``commit``)."""
    return hashlib.sha1(object_header(kind, len(data)) + data).hexdigest()


def blob_sha(data: bytes) -> str:
    return object_sha(b"blob", data)


def snapshot(root: Path, ignore: Iterable[str] = DEFAULT_IGNORE) -> Snapshot:
    """Read ``root`` as git would store it (without consulting any .gitignore)."""
    snap = Snapshot(root=root)
    ignore = tuple(ignore)
    _walk(root, "", snap, ignore)
    return snap


def _walk(base: Path, prefix: str, snap: Snapshot, ignore: tuple[str, ...]) -> None:
    with os.scandir(base) as it:
        items = sorted(it, key=lambda e: e.name)
    for item in items:
        rel = f"{prefix}{item.name}"
        if not representable(rel):  # git, the archive and the surface all need UTF-8
            shown = os.fsencode(rel).decode("utf-8", "backslashreplace")
            snap.problems.append((shown, "the path is not valid UTF-8 text"))
            continue
        if any(glob_matches(p, rel) for p in ignore):
            continue
        st = item.stat(follow_symlinks=False)
        if item.name == ".git":
            snap.problems.append((rel, "a .git entry is not allowed in a candidate tree"))
        elif stat.S_ISLNK(st.st_mode):
            target = os.readlink(item.path)
            snap.entries[rel] = Entry(MODE_LINK, blob_sha(os.fsencode(target)))
        elif stat.S_ISDIR(st.st_mode):
            _walk(Path(item.path), rel + "/", snap, ignore)
        elif stat.S_ISREG(st.st_mode):
            mode = MODE_EXEC if st.st_mode & stat.S_IXUSR else MODE_FILE
            try:
                snap.entries[rel] = Entry(mode, _file_sha(Path(item.path), st.st_size))
            except OSError as exc:  # UnsafeFile included: swapped or changed under us
                snap.problems.append((rel, f"changed while it was read: {exc}"))
        else:
            snap.problems.append((rel, "special file (fifo, socket or device) is not allowed"))


def representable(path: str) -> bool:
    """True when ``path`` (as ``os`` gave it: undecodable bytes as surrogates) is UTF-8
    text; a name that is not cannot enter a tree, the archive or a surface check."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _file_sha(path: Path, size: int) -> str:
    # opened without following links or blocking: the folder is a candidate's, and a
    # process it left running may swap a file for a link or a FIFO after the lstat
    h = hashlib.sha1(object_header(b"blob", size))
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        if os.fstat(fd).st_size != size:
            raise UnsafeFile(f"{path} changed while it was read")
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_objects(entries: FlatTree) -> tuple[str, list[tuple[str, bytes]]]:
    """Serialise a flat tree into git tree objects; returns (root sha, [(sha, body)])."""
    nested: dict = {}
    for path, entry in entries.items():
        node = nested
        parts = path.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = entry
    objects: list[tuple[str, bytes]] = []
    root = _tree(nested, objects)
    return root, objects


def _tree(node: dict, objects: list[tuple[str, bytes]]) -> str:
    rows: list[tuple[str, bytes]] = []
    for name, child in node.items():
        if isinstance(child, dict):
            sha = _tree(child, objects)
            rows.append((name + "/", f"{MODE_TREE} {name}".encode() + b"\0" + bytes.fromhex(sha)))
        else:
            rows.append((name, f"{child.mode} {name}".encode() + b"\0" + bytes.fromhex(child.sha)))
    # git orders entries by name, with trees compared as if their name ended in "/"
    rows.sort(key=lambda r: r[0].encode())
    body = b"".join(r[1] for r in rows)
    sha = object_sha(b"tree", body)
    objects.append((sha, body))
    return sha


def tree_hash(entries: FlatTree) -> str:
    return tree_objects(entries)[0]


@dataclass(frozen=True)
class Change:
    """One change between two flat trees."""

    kind: str  # added | deleted | modified | mode | renamed | type
    path: str
    old_path: str | None = None
    old: Entry | None = None
    new: Entry | None = None


def diff(old: FlatTree, new: FlatTree) -> list[Change]:
    """Changes from ``old`` to ``new``; exact renames (same blob and mode) are paired."""
    changes: list[Change] = []
    added = [p for p in new if p not in old]
    deleted = [p for p in old if p not in new]
    by_blob: dict[tuple[str, str], list[str]] = {}
    for p in deleted:
        by_blob.setdefault((old[p].mode, old[p].sha), []).append(p)
    renamed_from: set[str] = set()
    for p in added:
        sources = by_blob.get((new[p].mode, new[p].sha))
        if sources:
            src = sources.pop(0)
            renamed_from.add(src)
            changes.append(Change("renamed", p, old_path=src, old=old[src], new=new[p]))
        else:
            changes.append(Change("added", p, new=new[p]))
    for p in deleted:
        if p not in renamed_from:
            changes.append(Change("deleted", p, old=old[p]))
    for p, entry in new.items():
        before = old.get(p)
        if before is None or before == entry:
            continue
        if (before.mode == MODE_LINK) != (entry.mode == MODE_LINK):
            kind = "type"
        elif before.sha == entry.sha:
            kind = "mode"
        else:
            kind = "modified"
        changes.append(Change(kind, p, old=before, new=entry))
    changes.sort(key=lambda c: c.path)
    return changes
