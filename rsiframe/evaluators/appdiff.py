"""What the agent changed under /app: kept as evidence, size-capped.

Before the agent runs, :func:`scan` notes every file under the trial's /app (size, mtime,
mode; links by target). After it, :func:`changes_since` lists what was added, modified
or deleted, and keeps the content of the changed regular files (``app/solution.py``) as
artifacts, up to :data:`MAX_FILE_BYTES` each, :data:`MAX_TOTAL_BYTES` and
:data:`MAX_FILES` in all; what did not fit is named, not kept. Files are opened without
following links. The trajectory's ``app`` field lists it all; the viewer's evidence tree
shows the kept files beside the agent's logs.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 256 << 10
MAX_TOTAL_BYTES = 1 << 20
MAX_FILES = 50
MAX_SCANNED = 20_000  # a huge /app is noted, not walked to the end
#: the evaluator's wording for a non-zero exit that left /app as it was (rsiframe.evaluators.health)
UNTOUCHED = "before changing /app"

Signature = tuple[int, int, int, str]  # mode, size, mtime_ns, link target


def scan(root: Path) -> dict[str, Signature]:
    """Every entry under ``root`` (links not followed), by relative POSIX path."""
    out: dict[str, Signature] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
                continue
            target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
            rel = Path(path).relative_to(root).as_posix()
            out[rel] = (st.st_mode, st.st_size, st.st_mtime_ns, target)
            if len(out) >= MAX_SCANNED:
                return out
    return out


@dataclass
class AppChanges:
    changed: list[str] = field(default_factory=list)  # added or modified
    deleted: list[str] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)  # "app/<path>" -> content
    omitted: list[str] = field(default_factory=list)  # changed, but over a cap or not a file

    @property
    def touched(self) -> bool:
        return bool(self.changed or self.deleted)

    def manifest(self) -> dict[str, Any]:
        return {
            "changed": self.changed,
            "deleted": self.deleted,
            "kept": sorted(self.blobs),
            "omitted": self.omitted,
        }


def changes_since(root: Path, before: dict[str, Signature]) -> AppChanges:
    after = scan(root)
    out = AppChanges(
        changed=sorted(p for p, sig in after.items() if before.get(p) != sig),
        deleted=sorted(p for p in before if p not in after),
    )
    total = 0
    for rel in out.changed:
        data = _read_regular(root / rel) if len(out.blobs) < MAX_FILES else None
        if data is None or len(data) > MAX_FILE_BYTES or total + len(data) > MAX_TOTAL_BYTES:
            out.omitted.append(rel)
            continue
        total += len(data)
        out.blobs[f"app/{rel}"] = data
    return out


def _read_regular(path: Path) -> bytes | None:
    """A regular file's bytes, opened without following a link; None otherwise or if big."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_FILE_BYTES + 1)
    finally:
        os.close(fd)
