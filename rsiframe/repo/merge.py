"""Merge (framework-owned): a 3-way merge of two candidates' trees, restricted to the surface.

The ``merge`` slot's operator only plans (which second parent, against which common
ancestor, which side wins a conflict); the merge itself is done here, like git's: against
the plan's base (by default the two candidates' nearest common ancestor in the candidate
DAG), file by file. A surface file changed on one side only takes that side; a text file
changed on both sides is merged line by line with ``git merge-file``, and its conflicting
hunks take the side the plan names (``--ours`` or ``--theirs``); a file that cannot be
merged as text takes that side whole, as does every file changed on both sides when the
plan's ``granularity`` is ``file`` (GEPA's merge takes components whole). Paths outside
the surface always keep the first parent's version, so the guardrail (which compares
with the first parent) sees only surface changes.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rsiframe.api import MergePlan
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.repo.gittree import MODE_EXEC, MODE_FILE, MODE_LINK, Entry
from rsiframe.surface import Surface, glob_matches

_REGULAR = (MODE_FILE, MODE_EXEC)


def merge_base(parents: Mapping[str, Sequence[str]], a: str, b: str) -> str | None:
    """The nearest common ancestor of ``a`` and ``b`` (each its own ancestor) in the DAG.

    ``parents`` maps a candidate id to its parents' ids; the first ancestor of ``b``
    reached breadth-first that is also an ancestor of ``a`` is the base.
    """
    seen, todo = set(), [a]
    while todo:
        cid = todo.pop()
        if cid not in seen:
            seen.add(cid)
            todo.extend(parents.get(cid, ()))
    queue, visited = [b], set()
    while queue:
        cid = queue.pop(0)
        if cid in seen:
            return cid
        if cid not in visited:
            visited.add(cid)
            queue.extend(parents.get(cid, ()))
    return None


@dataclass
class MergeOutcome:
    """What the merge took from where: paths per kind of resolution."""

    from_second: list[str] = field(default_factory=list)  # changed on the second side only
    line_merged: list[str] = field(default_factory=list)  # both sides, merged cleanly
    conflicts: dict[str, str] = field(default_factory=dict)  # path -> the side that won

    def as_dict(self) -> dict[str, object]:
        return {
            "from_second": self.from_second,
            "line_merged": self.line_merged,
            "conflicts": self.conflicts,
        }


def three_way(
    repo: CandidateRepo,
    base: str,
    first: str,
    second: str,
    surface: Surface,
    plan: MergePlan,
    workdir: Path,
) -> MergeOutcome:
    """Merge commit ``second`` into ``workdir`` (an export of ``first``) against ``base``."""
    fo, fa, fb = repo.flat_tree(base), repo.flat_tree(first), repo.flat_tree(second)
    out = MergeOutcome()
    for path in sorted(set(fo) | set(fa) | set(fb)):
        if not surface.allows(path):
            continue
        o, a, b = fo.get(path), fa.get(path), fb.get(path)
        if a == b or b == o:
            continue  # the first side already has it
        if a == o:
            _write(repo, second, workdir, path, b)
            out.from_second.append(path)
            continue
        whole = plan.granularity == "file"  # GEPA: a component is taken whole from a side
        merged = None if whole else _merge_text(repo, base, first, second, path, o, a, b, None)
        if merged is not None:
            assert a is not None
            _put(workdir / path, merged, a.mode)
            out.line_merged.append(path)
            continue
        side = next((s for g, s in plan.files.items() if glob_matches(g, path)), plan.prefer)
        out.conflicts[path] = side
        merged = None if whole else _merge_text(repo, base, first, second, path, o, a, b, side)
        if merged is not None:
            assert a is not None
            _put(workdir / path, merged, a.mode)
        elif side == "second":
            _write(repo, second, workdir, path, b)
    return out


def _merge_text(
    repo: CandidateRepo,
    base: str,
    first: str,
    second: str,
    path: str,
    o: Entry | None,
    a: Entry | None,
    b: Entry | None,
    side: str | None,
) -> bytes | None:
    """``git merge-file`` of three versions of one regular file; None if it conflicts
    (``side`` given: conflicting hunks take that side) or is not mergeable text."""
    if a is None or b is None or a.mode != b.mode or a.mode not in _REGULAR:
        return None
    if o is not None and o.mode not in _REGULAR:
        return None
    with tempfile.TemporaryDirectory(prefix="rsiframe-merge-") as tmp:
        names = []
        for tag, commit, entry in (("a", first, a), ("o", base, o), ("b", second, b)):
            p = Path(tmp) / tag
            p.write_bytes(repo.read(commit, path) if entry is not None else b"")
            names.append(str(p))
        flag = {"first": ["--ours"], "second": ["--theirs"]}.get(side or "", [])
        proc = subprocess.run(
            ["git", "merge-file", "-p", "--quiet", *flag, *names], capture_output=True, check=False
        )
    return proc.stdout if proc.returncode == 0 else None


def _write(repo: CandidateRepo, commit: str, workdir: Path, path: str, e: Entry | None) -> None:
    dest = workdir / path
    if e is None:
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        return
    _put(dest, repo.read(commit, path), e.mode)


def _put(dest: Path, data: bytes, mode: str) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink() or dest.exists():
        dest.unlink()
    if mode == MODE_LINK:
        os.symlink(data.decode(), dest)
        return
    dest.write_bytes(data)
    dest.chmod(0o755 if mode == MODE_EXEC else 0o644)
