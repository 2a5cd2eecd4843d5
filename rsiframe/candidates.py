"""The run's git repository: one commit per candidate, a ref per candidate, clean exports.

A candidate's git parent is its parent candidate. Trees are written from
:mod:`rsiframe.gittree` snapshots, so what is committed is exactly what the
guardrail inspected; exports are checked against the commit's tree hash.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import git
from gitdb import IStream

from rsiframe.errors import RunFolderError
from rsiframe.gittree import (
    MODE_EXEC,
    MODE_GITLINK,
    MODE_LINK,
    Entry,
    FlatTree,
    Snapshot,
    snapshot,
    tree_objects,
)

_ACTOR = git.Actor("rsiframe", "rsiframe@localhost")
CANDIDATE_REFS = "refs/rsiframe/candidates"
REJECTED_REFS = "refs/rsiframe/rejected"


class ExportMismatch(Exception):
    """An exported folder does not hash to the commit's tree (a bug or tampering)."""


class CandidateRepo:
    """A bare git repository owned by one run."""

    def __init__(self, path: Path) -> None:
        try:
            self.repo = git.Repo(path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise RunFolderError(f"not a git repository: {path}") from exc
        self.path = path
        self._flat: dict[str, FlatTree] = {}

    @classmethod
    def create(cls, path: Path) -> CandidateRepo:
        git.Repo.init(path, bare=True)
        return cls(path)

    def close(self) -> None:
        self.repo.close()

    # -- writing ---------------------------------------------------------------

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
        got = self.repo.odb.store(IStream(kind, len(data), io.BytesIO(data))).hexsha
        got = got.decode() if isinstance(got, bytes) else got
        if got != expect:  # the file changed while we read it
            raise RuntimeError(f"object changed while storing: expected {expect}, stored {got}")

    def commit(self, tree_sha: str, parent: str | None, message: str, ref: str) -> str:
        """Commit ``tree_sha`` with ``parent`` as git parent and point ``ref`` at it."""
        tree = git.Tree(self.repo, bytes.fromhex(tree_sha))
        parents = [self.repo.commit(parent)] if parent else []
        commit = git.Commit.create_from_tree(
            self.repo,
            tree,
            message,
            parent_commits=parents,
            head=False,
            author=_ACTOR,
            committer=_ACTOR,
        )
        git.Reference.create(self.repo, ref, commit, force=True)
        return commit.hexsha

    # -- reading ---------------------------------------------------------------

    def has_commit(self, sha: str) -> bool:
        try:
            return self.repo.commit(sha).type == "commit"
        except (ValueError, git.BadName):
            return False

    def tree_of(self, commit: str) -> str:
        return self.repo.commit(commit).tree.hexsha

    def parents_of(self, commit: str) -> list[str]:
        return [p.hexsha for p in self.repo.commit(commit).parents]

    def flat_tree(self, commit: str) -> FlatTree:
        """``{path: Entry}`` of a commit (cached; commits are immutable)."""
        cached = self._flat.get(commit)
        if cached is None:
            cached = {}
            for item in self.repo.commit(commit).tree.traverse():
                if item.type == "tree":
                    continue
                cached[item.path] = Entry(format(item.mode, "o"), item.hexsha)
            self._flat[commit] = cached
        return dict(cached)

    def read(self, commit: str, path: str) -> bytes:
        entry = self.flat_tree(commit)[path]
        return self.repo.odb.stream(bytes.fromhex(entry.sha)).read()

    def export(self, commit: str, dest: Path) -> str:
        """Write the commit's tree into empty ``dest`` and check it hashes to the commit's tree."""
        dest.mkdir(parents=True, exist_ok=True)
        odb = self.repo.odb
        for path, entry in self.flat_tree(commit).items():
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            data = odb.stream(bytes.fromhex(entry.sha)).read()
            if entry.mode == MODE_LINK:
                os.symlink(os.fsdecode(data), target)
            elif entry.mode == MODE_GITLINK:
                raise ExportMismatch(f"gitlink {path} cannot be exported")
            else:
                target.write_bytes(data)
                target.chmod(0o755 if entry.mode == MODE_EXEC else 0o644)
        expected = self.tree_of(commit)
        got = snapshot(dest, ignore=())
        if got.problems or got.tree_sha != expected:
            raise ExportMismatch(
                f"export of {commit[:12]} hashes to {got.tree_sha[:12]}, expected {expected[:12]}"
            )
        return expected


def fresh_dir(path: Path) -> Path:
    """Remove ``path`` if present and create it empty."""
    if path.exists() or path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
