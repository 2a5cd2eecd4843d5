"""Evidence of one candidate, read on demand: diffs from repo.git and artifacts, paged.

Everything here reads: git objects through :class:`rsiframe.repo.candidates.CandidateRepo`
(``git cat-file``, never a command that writes), artifacts by seeking into their
content-addressed files. Large files are read one page at a time; the hash of an
artifact is checked by streaming it, separately from showing it.
"""

from __future__ import annotations

import difflib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe.archive.log import artifact_path
from rsiframe.archive.state import Candidate
from rsiframe.errors import ArchiveCorrupt, RsiError
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.repo.gittree import MODE_LINK, diff
from rsiframe.util.digest import sha256_bytes, sha256_file

PAGE_BYTES = 64 * 1024
MAX_DIFF_BYTES = 512 * 1024


@dataclass(frozen=True)
class FileDiff:
    path: str
    kind: str  # added | deleted | modified | mode | renamed | type
    text: str  # a unified diff, or a one-line note for binary/large files
    old_path: str | None = None


class Repo:
    """A lazily opened, thread-safe reader of the run's repo.git."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._repo: CandidateRepo | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._repo is not None:
                self._repo.close()
                self._repo = None

    def diff(self, old: str | None, new: str) -> list[FileDiff]:
        """Per-file unified diffs from commit ``old`` (None: empty tree) to ``new``."""
        with self._lock:
            if self._repo is None:
                self._repo = CandidateRepo(self.path)
            repo = self._repo
            before = repo.flat_tree(old) if old else {}
            after = repo.flat_tree(new)
            out = []
            for ch in diff(before, after):
                a = repo.read(old, ch.old_path or ch.path) if old and ch.old else b""
                b = repo.read(new, ch.path) if ch.new else b""
                if ch.kind == "mode":
                    text = (
                        f"mode {ch.old.mode if ch.old else '?'} -> {ch.new.mode if ch.new else '?'}"
                    )
                elif ch.new is not None and ch.new.mode == MODE_LINK:
                    text = f"symlink -> {b.decode(errors='replace')}"
                else:
                    text = unified(a, b, ch.old_path or ch.path, ch.path)
                out.append(FileDiff(ch.path, ch.kind, text, ch.old_path))
            return out


def unified(a: bytes, b: bytes, old_name: str, new_name: str) -> str:
    if len(a) + len(b) > MAX_DIFF_BYTES:
        return f"(large file: {len(a)} -> {len(b)} bytes; not diffed)"
    if b"\0" in a[:8000] or b"\0" in b[:8000]:
        return f"(binary file: {len(a)} -> {len(b)} bytes)"
    lines = difflib.unified_diff(
        a.decode(errors="replace").splitlines(keepends=True),
        b.decode(errors="replace").splitlines(keepends=True),
        fromfile=f"a/{old_name}",
        tofile=f"b/{new_name}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return text or "(no textual change)"


def diff_base(c: Candidate, parent: Candidate | None) -> tuple[str | None, str | None]:
    """(parent commit, candidate commit) to diff; a rejected mutation's evidence commit."""
    new = c.commit or (c.rejected or {}).get("commit")
    old = c.parent_commit or (parent.commit if parent else None)
    return old, new


class Pager:
    """One artifact read a page at a time."""

    def __init__(self, run: Path, digest: str, page_bytes: int = PAGE_BYTES) -> None:
        self.digest = digest
        self.path = artifact_path(run, digest)
        self.page_bytes = page_bytes
        try:
            self.size = self.path.stat().st_size
        except FileNotFoundError as exc:
            raise ArchiveCorrupt(f"artifact {digest} is missing") from exc

    @property
    def pages(self) -> int:
        return max(1, -(-self.size // self.page_bytes))

    def page(self, n: int) -> str:
        with self.path.open("rb") as f:
            f.seek(n * self.page_bytes)
            data = f.read(self.page_bytes)
        return data.decode(errors="replace")

    def check(self) -> bool:
        """Whether the file still hashes to its name (streamed)."""
        return "sha256:" + sha256_file(self.path) == self.digest


def read_json(run: Path, digest: str, limit: int = 8 << 20) -> Any:
    """A small JSON artifact (trajectory, analysis, rollout, mutation), hash-checked."""
    pager = Pager(run, digest)
    if pager.size > limit:
        raise ArchiveCorrupt(f"artifact {digest} is too large to show as JSON ({pager.size} B)")
    data = pager.path.read_bytes()
    if "sha256:" + sha256_bytes(data) != digest:
        raise ArchiveCorrupt(f"artifact {digest} does not match its hash")
    return json.loads(data)


def read_text(run: Path, digest: str, limit: int = PAGE_BYTES) -> str:
    """The first ``limit`` bytes of a text artifact (lessons, tracebacks)."""
    try:
        return Pager(run, digest, limit).page(0)
    except RsiError as exc:
        return f"({exc})"
