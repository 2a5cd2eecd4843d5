"""Surface globs: which paths of a candidate tree a mutation may change.

Patterns are matched against POSIX paths relative to the tree root:
``*`` and ``?`` stay inside one path segment, ``**`` spans any number of
segments (including none), a trailing ``/`` or a pattern that names a
directory covers everything below it. Exclude wins over include.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache


@lru_cache(maxsize=1024)
def _compile(pattern: str) -> re.Pattern[str]:
    pat = pattern.strip().lstrip("/")
    if pat.endswith("/"):
        pat += "**"
    out: list[str] = []
    parts = pat.split("/")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            # zero or more whole segments
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        out.append(_segment(part))
        if not last:
            out.append("/")
    return re.compile("".join(out) + r"\Z")


def _segment(part: str) -> str:
    res = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            res.append("[^/]*")
        elif c == "?":
            res.append("[^/]")
        elif c == "[":
            j = part.find("]", i + 1)
            if j == -1:
                res.append(re.escape(c))
            else:
                body = part[i + 1 : j].replace("/", "")
                # a class, like * and ?, never matches the path separator
                if body.startswith("!"):
                    body = "^/" + body[1:]
                res.append(f"[{body}]")
                i = j
        else:
            res.append(re.escape(c))
        i += 1
    return "".join(res)


def glob_matches(pattern: str, path: str) -> bool:
    """True when ``pattern`` matches ``path`` or one of its parent directories."""
    rx = _compile(pattern)
    if rx.match(path):
        return True
    parts = path.split("/")
    return any(rx.match("/".join(parts[:k])) for k in range(1, len(parts)))


@dataclass(frozen=True)
class Surface:
    """Include/exclude globs naming what a mutation may change."""

    include: tuple[str, ...]
    exclude: tuple[str, ...] = field(default_factory=tuple)

    def allows(self, path: str) -> bool:
        if any(glob_matches(p, path) for p in self.exclude):
            return False
        return any(glob_matches(p, path) for p in self.include)

    def matching(self, paths: Iterable[str]) -> list[str]:
        return [p for p in paths if self.allows(p)]
