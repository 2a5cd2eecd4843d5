"""The guardrail: compare a mutation's actual tree diff against the surface.

Framework-owned, never an operator. Every change (add, edit, delete, rename,
mode, type) must lie inside the surface; some things are refused everywhere:
``.git`` entries, special files, gitlinks, ``.gitmodules`` and symlinks that
point outside the tree.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from rsiframe.repo.gittree import MODE_GITLINK, MODE_LINK, Change, FlatTree, Snapshot, diff
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


def symlink_escapes(path: str, target: str, links: dict[str, str] | None = None) -> bool:
    """True when a symlink at ``path`` points outside the tree.

    The target is resolved component by component through the other symlinks of
    the tree (``links``: path -> target), as the kernel would, so ``up -> self/../..``
    with ``self -> .`` is caught. Loops count as escapes.
    """
    links = links or {}
    if posixpath.isabs(target):
        return True
    current = [p for p in posixpath.dirname(path).split("/") if p]
    remaining = target.split("/")
    hops = 0
    while remaining:
        comp = remaining.pop(0)
        if comp in ("", "."):
            continue
        if comp == "..":
            if not current:
                return True
            current.pop()
            continue
        here = "/".join([*current, comp])
        if here in links:
            hops += 1
            nxt = links[here]
            if hops > 40 or posixpath.isabs(nxt):
                return True
            remaining = nxt.split("/") + remaining
            continue
        current.append(comp)
    return False


def check(parent: FlatTree, snap: Snapshot, surface: Surface) -> GuardrailReport:
    """All violations of the change from ``parent`` to ``snap``."""
    violations = [Violation(p, "forbidden", why) for p, why in snap.problems]
    changes = diff(parent, snap.entries)
    for ch in changes:
        for p in filter(None, (ch.path, ch.old_path)):
            if not surface.allows(p):
                violations.append(Violation(p, ch.kind, f"{ch.kind} outside the surface"))
            if p == ".gitmodules" or p.endswith("/.gitmodules"):
                violations.append(Violation(p, ch.kind, ".gitmodules may not change"))
        if ch.new is not None and ch.new.mode == MODE_GITLINK:
            violations.append(Violation(ch.path, ch.kind, "gitlinks (submodules) are not allowed"))
    # every symlink of the new tree, since changing one link can redirect another
    links = {
        p: snap.content(p).decode(errors="replace")
        for p, e in snap.entries.items()
        if e.mode == MODE_LINK
    }
    kinds = {ch.path: ch.kind for ch in changes}
    for path, target in sorted(links.items()):
        if symlink_escapes(path, target, links):
            violations.append(
                Violation(
                    path, kinds.get(path, "unchanged"), f"symlink points outside the tree: {target}"
                )
            )
    return GuardrailReport(changes=changes, violations=violations)
