"""The run's git repository: one commit per candidate, a ref per candidate, clean exports.

A candidate's git parent is its parent candidate. Trees are written from
:mod:`rsiframe.repo.gittree` snapshots, so what is committed is exactly what the
guardrail inspected; exports are checked against the commit's tree hash.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import git

from rsiframe.archive.log import write_atomic
from rsiframe.errors import RunFolderError
from rsiframe.repo.exportdir import GitlinkInTree, write_tree
from rsiframe.repo.gittree import (
    MODE_GITLINK,
    Entry,
    FlatTree,
    Snapshot,
    object_header,
    object_sha,
    snapshot,
    tree_objects,
)
from rsiframe.util.spares import Spares

_IDENT = "rsiframe <rsiframe@localhost>"
#: verified exports kept in the export folder (admitted ones are reused as parents)
KEEP_EXPORTS = 16
#: exports no longer kept that are set aside to be rewritten in place as new ones
SPARE_EXPORTS = 4
CANDIDATE_REFS = "refs/rsiframe/candidates"
REJECTED_REFS = "refs/rsiframe/rejected"


F = TypeVar("F", bound=Callable[..., Any])


def _serial(method: F) -> F:
    """One git access at a time: GitPython's object reader is not thread-safe, and
    candidates in flight store, commit and export from worker threads."""

    @functools.wraps(method)
    def locked(self: CandidateRepo, *args: Any, **kwargs: Any) -> Any:
        with self._git:
            return method(self, *args, **kwargs)

    return locked  # type: ignore[return-value]  # functools.wraps keeps method's signature


class ExportMismatch(Exception):
    """An exported folder does not hash to the commit's tree (a bug or tampering)."""


class CandidateRepo:
    """A bare git repository owned by one run."""

    def __init__(self, path: Path, exports: Path | None = None) -> None:
        """``exports``: where :meth:`verified_export` keeps exported trees (a run's work folder)."""
        try:
            self.repo = git.Repo(path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise RunFolderError(f"not a git repository: {path}") from exc
        self.path = path
        self._flat: dict[str, FlatTree] = {}
        self._trees: dict[str, str] = {}
        self.exports = exports
        self._exporting = threading.Lock()
        self._git = threading.RLock()
        self._held: Counter[str] = Counter()  # exports in use by work in flight: never pruned
        # exports set aside, to be rewritten in place as new ones
        self._spares = Spares(exports, "spare", SPARE_EXPORTS) if exports is not None else None

    @classmethod
    def create(cls, path: Path, exports: Path | None = None) -> CandidateRepo:
        git.Repo.init(path, bare=True)
        return cls(path, exports)

    def close(self) -> None:
        if self._spares is not None:
            self._spares.close()
        self.repo.close()

    # -- writing ---------------------------------------------------------------

    @_serial
    def store(self, snap: Snapshot) -> str:
        """Write the snapshot's blobs and trees; returns the root tree sha."""
        odb = self.repo.odb
        for path, entry in snap.entries.items():
            if entry.mode == MODE_GITLINK or odb.has_object(bytes.fromhex(entry.sha)):
                continue
            self._put(b"blob", snap.content(path), entry.sha)
        root, objects = tree_objects(snap.entries)
        for sha, body in objects:
            if not odb.has_object(bytes.fromhex(sha)):
                self._put(b"tree", body, sha)
        return root

    def _put(self, kind: bytes, data: bytes, expect: str) -> None:
        """Write an object read from disk, checked against the sha its snapshot recorded."""
        sha = object_sha(kind, data)
        if sha != expect:  # the file changed while we read it
            raise RuntimeError(f"object changed while storing: expected {expect}, got {sha}")
        self._write(kind, data, sha)

    def _write(self, kind: bytes, data: bytes, sha: str) -> None:
        """Write one loose object (what ``git hash-object -w`` does, without a process)."""
        path = self.path / "objects" / sha[:2] / sha[2:]
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            body = object_header(kind, len(data)) + data
            write_atomic(path, zlib.compress(body, 1), durable=False)

    @_serial
    def commit(
        self,
        tree_sha: str,
        parent: str | None,
        message: str,
        ref: str,
        entries: FlatTree | None = None,
        merged: str | None = None,
    ) -> str:
        """Commit ``tree_sha`` with ``parent`` as git parent and point ``ref`` at it.

        The commit object and the loose ref are written directly (no git process);
        ``entries``, when given, seeds the flat-tree cache for the new commit.
        """
        stamp = f"{int(time.time())} +0000"
        lines = [f"tree {tree_sha}"]
        if parent:
            lines.append(f"parent {parent}")
        if merged:  # a merge commit's second parent
            lines.append(f"parent {merged}")
        lines += [f"author {_IDENT} {stamp}", f"committer {_IDENT} {stamp}", "", message, ""]
        body = "\n".join(lines).encode()
        sha = object_sha(b"commit", body)
        if not self.repo.odb.has_object(bytes.fromhex(sha)):
            self._write(b"commit", body, sha)
        self.set_ref(ref, sha)
        if entries is not None:
            self._flat[sha] = dict(entries)
        self._trees[sha] = tree_sha
        return sha

    def set_ref(self, ref: str, sha: str) -> None:
        if not ref.startswith("refs/") or ".." in ref:
            raise ValueError(f"bad ref name {ref!r}")
        path = self.path / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, f"{sha}\n".encode(), durable=False)

    # -- reading ---------------------------------------------------------------

    def ref_target(self, ref: str) -> str | None:
        """The sha ``ref`` points at (its loose file, else ``packed-refs``); None when unset."""
        try:
            return (self.path / ref).read_text().strip()
        except OSError:
            pass
        try:
            for line in (self.path / "packed-refs").read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref:
                    return sha
        except OSError:
            pass
        return None

    @_serial
    def has_commit(self, sha: str) -> bool:
        try:
            return self.repo.odb.info(bytes.fromhex(sha)).type == b"commit"
        except (ValueError, git.BadName, git.BadObject):
            return False

    @_serial
    def tree_of(self, commit: str) -> str:
        tree = self._trees.get(commit)
        if tree is None:
            tree = self._trees[commit] = self.repo.commit(commit).tree.hexsha
        return tree

    @_serial
    def parents_of(self, commit: str) -> list[str]:
        return [p.hexsha for p in self.repo.commit(commit).parents]

    @_serial
    def flat_tree(self, commit: str) -> FlatTree:
        """``{path: Entry}`` of a commit (cached; commits are immutable)."""
        cached = self._flat.get(commit)
        if cached is None:
            cached = {}
            items: Iterator[Any] = self.repo.commit(commit).tree.traverse()
            for item in items:
                if item.type == "tree":
                    continue
                cached[item.path] = Entry(format(item.mode, "o"), item.hexsha)
            self._flat[commit] = cached
        return dict(cached)

    @_serial
    def read(self, commit: str, path: str) -> bytes:
        entry = self.flat_tree(commit)[path]
        return self.repo.odb.stream(bytes.fromhex(entry.sha)).read()

    @_serial
    def export(self, commit: str, dest: Path) -> str:
        """Write the commit's tree into ``dest`` (empty, or holding an older export: it is
        rewritten in place, :mod:`rsiframe.repo.exportdir`) and check it hashes to the
        commit's tree."""
        odb = self.repo.odb
        try:
            entries = self.flat_tree(commit)
            modes = {path: e.mode for path, e in entries.items()}
            write_tree(
                dest, modes, lambda path: odb.stream(bytes.fromhex(entries[path].sha)).read()
            )
        except GitlinkInTree as exc:
            raise ExportMismatch(f"gitlink {exc} cannot be exported") from exc
        expected = self.tree_of(commit)
        got = snapshot(dest, ignore=())
        if got.problems or got.tree_sha != expected:
            raise ExportMismatch(
                f"export of {commit[:12]} hashes to {got.tree_sha[:12]}, expected {expected[:12]}"
            )
        return expected

    # -- the export cache ------------------------------------------------------

    def verified_export(self, name: str, commit: str, tree: str) -> Path:
        """The commit's tree under ``exports/name``: exported once, and re-hashed against
        ``tree`` before every reuse (an altered export is exported again). Keeps the
        :data:`KEEP_EXPORTS` newest; an older one is kept aside (up to :data:`SPARE_EXPORTS`)
        and rewritten in place as the next new export, where it differs."""
        assert self.exports is not None, "this repository has no export folder"
        with self._exporting:
            dest = self.exports / name
            if dest.is_dir():
                got = snapshot(dest, ignore=())
                if not got.problems and got.tree_sha == tree:
                    return dest
            elif self._spares is not None:
                self._spares.take(dest)
            try:
                self.export(commit, dest)
            except (ExportMismatch, OSError):  # what was there could not be made right: anew
                fresh_dir(dest)
                self.export(commit, dest)
            os.utime(dest)  # the newest now, whatever was rewritten in place
            exports = [p for p in dest.parent.iterdir() if not p.name.startswith(".")]
            kept = sorted(exports, key=lambda p: p.stat().st_mtime)  # (.discard-*: going)
            for old in kept[:-KEEP_EXPORTS]:
                self._set_aside(old)
            return dest

    @contextlib.contextmanager
    def holding(self, *names: str) -> Iterator[None]:
        """Keep these exports while work in flight uses them (pruning skips them)."""
        with self._exporting:
            self._held.update(names)
        try:
            yield
        finally:
            with self._exporting:
                self._held.subtract(names)

    def drop_export(self, name: str) -> None:
        """Forget one export (a declined candidate will not be a parent)."""
        if self.exports is not None:
            with self._exporting:
                self._set_aside(self.exports / name)

    def _set_aside(self, export: Path) -> None:
        """An export no longer kept: a spare for the next new one (one that work in flight
        uses stays)."""
        if not self._held[export.name] and self._spares is not None:
            self._spares.set_aside(export)


def fresh_dir(path: Path) -> Path:
    """Remove ``path`` if present and create it empty."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path
