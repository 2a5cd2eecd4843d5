"""Edits a model proposes, in Aider's SEARCH/REPLACE format or as whole files; strict apply.

A block is the file's path on its own line, then (usually inside a fence)::

    <<<<<<< SEARCH
    the old lines, exactly
    =======
    the new lines
    >>>>>>> REPLACE

A block without a path line takes the previous block's path, or ``default_path`` (the
single file of a one-file surface, as OpenEvolve accepts). A fenced block right under a
path line and holding no markers replaces that whole file (``allow_whole``). Applying is
strict and all-or-nothing: every SEARCH text must occur exactly once in its file (an
empty SEARCH creates a file that does not exist yet), else :class:`EditError` says which
block failed and why, for the model to try again. Paths must stay inside the work
folder; whether the surface allows them is the guardrail's decision, not this module's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

SEARCH = re.compile(r"^\s*<{5,9} ?SEARCH\s*$")
DIVIDER = re.compile(r"^\s*={5,9}\s*$")
REPLACE = re.compile(r"^\s*>{5,9} ?REPLACE\s*$")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+.-]*)\s*$")
MAX_PATH = 240


class EditError(ValueError):
    """The answer's edits cannot be parsed or applied; the message is fed back to the model."""


@dataclass(frozen=True)
class Edit:
    path: str
    search: str  # empty for a whole file or a new file
    replace: str
    whole: bool = False


def _as_path(line: str) -> str | None:
    """The path a line names (``path``, `` `path` ``, ``**path**``, ``path:``), or None."""
    s = line.strip().strip("*`'\"").rstrip(":").strip().strip("*`'\"")
    s = s.removeprefix("File:").removeprefix("file:").strip().strip("`")
    if not s or len(s) > MAX_PATH or " " in s or FENCE.match(s) or s.startswith("#"):
        return None
    if SEARCH.match(s) or DIVIDER.match(s) or REPLACE.match(s):
        return None
    return s if ("." in s or "/" in s) else None


def _path_before(lines: list[str], i: int) -> str | None:
    """The path line just above line ``i`` (skipping one fence opening)."""
    j = i - 1
    if j >= 0 and FENCE.match(lines[j]):
        j -= 1
    return _as_path(lines[j]) if j >= 0 else None


def parse_edits(
    text: str, *, default_path: str | None = None, allow_whole: bool = True
) -> list[Edit]:
    """Every edit in a model's answer, in order; EditError for a malformed block."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    edits: list[Edit] = []
    last_path: str | None = None
    i = 0
    while i < len(lines):
        edit: Edit | None
        if SEARCH.match(lines[i]):
            number = len(edits) + 1
            path = _path_before(lines, i) or last_path or default_path
            if path is None:
                raise EditError(
                    f"block {number}: no file path; put the file's path on the line "
                    "before the block"
                )
            edit, i = _search_replace(lines, i, f"block {number} ({path})", path)
        elif (fence := FENCE.match(lines[i])) and fence.group(1):
            edit, i = _whole_file(lines, i, fence.group(1), allow_whole)
        else:
            edit, i = None, i + 1
        if edit is not None:
            edits.append(edit)
            last_path = edit.path
    return edits


def _marker_after(
    lines: list[str],
    start: int,
    marker: re.Pattern[str],
    stray: tuple[re.Pattern[str], ...],
    *,
    missing: str,
    misplaced: str,
) -> int:
    """The index of the first line from ``start`` that ``marker`` matches; EditError
    (``misplaced``) when a ``stray`` marker comes first, (``missing``) when none does."""
    j = start
    while j < len(lines) and not marker.match(lines[j]):
        if any(p.match(lines[j]) for p in stray):
            raise EditError(misplaced)
        j += 1
    if j >= len(lines):
        raise EditError(missing)
    return j


def _search_replace(lines: list[str], i: int, block: str, path: str) -> tuple[Edit, int]:
    """The SEARCH/REPLACE block whose SEARCH line is ``lines[i]``, and the index after it;
    ``block`` names it in errors."""
    j = _marker_after(
        lines,
        i + 1,
        DIVIDER,
        (SEARCH, REPLACE),
        missing=f"{block}: no ======= line after SEARCH",
        misplaced=f"{block}: expected ======= after SEARCH",
    )
    no_replace = f"{block}: no >>>>>>> REPLACE line"
    k = _marker_after(
        lines, j + 1, REPLACE, (SEARCH, DIVIDER), missing=no_replace, misplaced=no_replace
    )
    search = "\n".join(lines[i + 1 : j])
    replace = "\n".join(lines[j + 1 : k])
    return Edit(path, search + "\n" if search else "", replace + "\n" if replace else ""), k + 1


def _whole_file(lines: list[str], i: int, fence: str, allow_whole: bool) -> tuple[Edit | None, int]:
    """The whole file in the fenced block opening at ``lines[i]`` (None when it holds
    markers, has no path line above it or whole files are not allowed), and the index to
    read on from."""
    close = next((k for k in range(i + 1, len(lines)) if lines[k].strip() == fence), None)
    body = lines[i + 1 : close] if close is not None else []
    if close is None or any(SEARCH.match(b) for b in body):
        return None, i + 1  # markers inside: the SEARCH branch reads them
    path = _as_path(lines[i - 1]) if i > 0 else None
    if allow_whole and path is not None:
        return Edit(path, "", "\n".join(body) + "\n", whole=True), close + 1
    return None, close + 1


def _inside(workdir: Path, path: str) -> Path:
    rel = PurePosixPath(path.removeprefix("./"))
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise EditError(f"{path}: a path must be relative and stay inside the work folder")
    return workdir / Path(*rel.parts)


def apply_edits(edits: list[Edit], workdir: Path) -> list[str]:
    """Apply every edit or none; return the changed paths (relative, in first-edit order)."""
    if not edits:
        raise EditError("no edits found: answer with SEARCH/REPLACE blocks or a whole file")
    pending: dict[str, str] = {}  # path -> new text
    for number, e in enumerate(edits, start=1):
        target = _inside(workdir, e.path)
        current = pending[e.path] if e.path in pending else _read_target(target, e.path, number)
        pending[e.path] = _edited(current, e, number)
    for path, text in pending.items():
        target = _inside(workdir, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return list(pending)


def _read_target(target: Path, path: str, number: int) -> str | None:
    """The file an edit changes, as it is now (None when it does not exist yet)."""
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise EditError(f"block {number}: {path} is not a regular file")
    return target.read_text() if target.exists() else None


def _edited(current: str | None, e: Edit, number: int) -> str:
    """The file's text after edit ``e`` (block ``number``): a whole file or a new file as
    given, else the one occurrence of the SEARCH text replaced."""
    if e.whole:
        return e.replace
    if current is None:
        if e.search.strip():
            raise EditError(f"block {number}: {e.path} does not exist")
        return e.replace
    if not e.search.strip():
        raise EditError(
            f"block {number}: empty SEARCH for {e.path}, which exists; quote the lines to change"
        )
    count = current.count(e.search)
    if count == 0:
        raise EditError(
            f"block {number}: the SEARCH text does not match {e.path} exactly; "
            "copy the lines from the file as they are, whitespace included"
        )
    if count > 1:
        raise EditError(
            f"block {number}: the SEARCH text occurs {count} times in {e.path}; "
            "include more lines so it is unique"
        )
    return current.replace(e.search, e.replace, 1)
