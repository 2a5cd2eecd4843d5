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
    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        if SEARCH.match(line):
            number = len(edits) + 1
            path = _path_before(lines, i) or last_path or default_path
            if path is None:
                raise EditError(
                    f"block {number}: no file path; put the file's path on the line "
                    "before the block"
                )
            j = i + 1
            while j < n and not DIVIDER.match(lines[j]):
                if SEARCH.match(lines[j]) or REPLACE.match(lines[j]):
                    raise EditError(f"block {number} ({path}): expected ======= after SEARCH")
                j += 1
            if j >= n:
                raise EditError(f"block {number} ({path}): no ======= line after SEARCH")
            k = j + 1
            while k < n and not REPLACE.match(lines[k]):
                if SEARCH.match(lines[k]) or DIVIDER.match(lines[k]):
                    raise EditError(f"block {number} ({path}): no >>>>>>> REPLACE line")
                k += 1
            if k >= n:
                raise EditError(f"block {number} ({path}): no >>>>>>> REPLACE line")
            search = "\n".join(lines[i + 1 : j])
            replace = "\n".join(lines[j + 1 : k])
            edits.append(
                Edit(path, search + "\n" if search else "", replace + "\n" if replace else "")
            )
            last_path = path
            i = k + 1
            continue
        fence = FENCE.match(line)
        if fence and fence.group(1):
            close = next((k for k in range(i + 1, n) if lines[k].strip() == fence.group(1)), None)
            body = lines[i + 1 : close] if close is not None else []
            if close is None or any(SEARCH.match(b) for b in body):
                i += 1  # markers inside: the SEARCH branch reads them
                continue
            path = _as_path(lines[i - 1]) if i > 0 else None
            if allow_whole and path is not None:
                edits.append(Edit(path, "", "\n".join(body) + "\n", whole=True))
                last_path = path
            i = close + 1
            continue
        i += 1
    return edits


def _inside(workdir: Path, path: str) -> Path:
    rel = PurePosixPath(path.removeprefix("./"))
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise EditError(f"{path}: a path must be relative and stay inside the work folder")
    return workdir / Path(*rel.parts)


def apply_edits(edits: list[Edit], workdir: Path) -> list[str]:
    """Apply every edit or none; return the changed paths (relative, in first-edit order)."""
    if not edits:
        raise EditError("no edits found: answer with SEARCH/REPLACE blocks or a whole file")
    pending: dict[str, str | None] = {}  # path -> new text
    for number, e in enumerate(edits, start=1):
        target = _inside(workdir, e.path)
        if e.path in pending:
            current = pending[e.path]
        elif target.is_symlink() or (target.exists() and not target.is_file()):
            raise EditError(f"block {number}: {e.path} is not a regular file")
        else:
            current = target.read_text() if target.exists() else None
        if e.whole:
            pending[e.path] = e.replace
            continue
        if current is None:
            if e.search.strip():
                raise EditError(f"block {number}: {e.path} does not exist")
            pending[e.path] = e.replace
            continue
        if not e.search.strip():
            raise EditError(
                f"block {number}: empty SEARCH for {e.path}, which exists; "
                "quote the lines to change"
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
        pending[e.path] = current.replace(e.search, e.replace, 1)
    for path, text in pending.items():
        target = _inside(workdir, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text or "")
    return list(pending)
