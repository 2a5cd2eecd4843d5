"""The guardrail: compare a mutation's actual tree diff against the surface.

Framework-owned, never an operator. Every change (add, edit, delete, rename,
mode, type) must lie inside the surface; some things are refused everywhere:
``.git`` entries, special files, gitlinks, ``.gitmodules`` and symlinks that
point outside the tree.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from rsiframe.gittree import MODE_GITLINK, MODE_LINK, Change, FlatTree, Snapshot, diff
from rsiframe.surface import Surface


@dataclass(frozen=True)
class Violation:
    path: str
    kind: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "kind": self.kind, "reason": self.reason}


@dataclass(frozen=True)
class GuardrailReport:
    changes: list[Change]
    violations: list[Violation]

    @property
    def ok(self) -> bool:
        return not self.violations


def symlink_escapes(path: str, target: str) -> bool:
    """True when a symlink at ``path`` (relative to the tree root) points outside the tree."""
    if posixpath.isabs(target):
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return resolved == ".." or resolved.startswith("../")


def check(parent: FlatTree, snap: Snapshot, surface: Surface) -> GuardrailReport:
    """All violations of the change from ``parent`` to ``snap``."""
    violations = [Violation(p, "forbidden", why) for p, why in snap.problems]
    changes = diff(parent, snap.entries)
    for ch in changes:
        for p in filter(None, (ch.path, ch.old_path)):
            if not surface.allows(p):
                violations.append(Violation(p, ch.kind, f"{ch.kind} outside the surface"))
        if ch.path == ".gitmodules" or ch.path.endswith("/.gitmodules"):
            violations.append(Violation(ch.path, ch.kind, ".gitmodules may not change"))
        new = ch.new
        if new is not None and new.mode == MODE_GITLINK:
            violations.append(Violation(ch.path, ch.kind, "gitlinks (submodules) are not allowed"))
        if new is not None and new.mode == MODE_LINK:
            target = snap.content(ch.path).decode(errors="replace")
            if symlink_escapes(ch.path, target):
                violations.append(
                    Violation(ch.path, ch.kind, f"symlink points outside the tree: {target}")
                )
    return GuardrailReport(changes=changes, violations=violations)
