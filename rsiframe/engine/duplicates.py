"""The duplicate rule: a child whose tree equals an existing candidate's is never evaluated.

A transaction claims its child's tree right after the guardrail (:meth:`TreeClaims.claim`);
a tree already held by another candidate makes the child ``rejected`` with ``duplicate of
<id>``, before validate's minibatch, the commit and any evaluation, in every mode and K.
A tree is held by every candidate that got that far: committed ones (``candidate_mutated``,
whatever their fate after) and those validate or novelty rejected (``candidate_rejected``
with ``tree``), so a resumed run holds the same trees as the run before it.

Generational mode is deterministic: the same candidates for every K. So there the earlier
proposal keeps a tree whatever finishes first: a child's claim waits until every child
proposed before it in its generation has claimed its own tree or ended (with K=1 they all
have). Steady mode is not deterministic anyway: the first claim keeps the tree.
"""

from __future__ import annotations

import threading

from rsiframe.archive import events as E
from rsiframe.archive.state import RunState
from rsiframe.engine.hooks import Notice

#: how often a waiting claim looks again (it is woken at once by the claims it waits for)
_POLL_S = 1.0


class TreeClaims:
    """Which candidate holds each tree; safe from any thread."""

    def __init__(self, state: RunState, ordered: bool) -> None:
        """``ordered``: generational mode (the earlier proposal wins, see the module)."""
        self.ordered = ordered
        self._cond = threading.Condition()
        self._holders: dict[str, str] = {}  # tree -> the candidate that holds it
        self._open: dict[str, int] = {}  # transactions not past their claim -> proposal index
        for c in state.candidates.values():
            tree = c.tree or (c.rejected or {}).get("tree")
            if isinstance(tree, str):
                self._holders.setdefault(tree, c.id)

    def on_event(self, notice: Notice) -> None:
        """A hook (``EVENT_WRITTEN``): the trees candidates hold, as the archive records them."""
        d = notice.data
        if isinstance(d, E.CandidateMutated | E.CandidateRejected) and d.tree:
            with self._cond:
                self._holders.setdefault(d.tree, d.id)

    def opened(self, cid: str, index: int) -> None:
        """A transaction was proposed (on the writer, in proposal order)."""
        with self._cond:
            self._open[cid] = index

    def closed(self, cid: str) -> None:
        """The transaction ended, at its claim or before (a rejection, a failure)."""
        with self._cond:
            if self._open.pop(cid, None) is not None:
                self._cond.notify_all()

    def claim(self, cid: str, tree: str) -> str | None:
        """Hold ``tree`` for ``cid``; the candidate that already holds it, or None."""
        with self._cond:
            index = self._open.get(cid)
            while self.ordered and index is not None and self._earlier_open(index):
                self._cond.wait(_POLL_S)
            self._open.pop(cid, None)
            self._cond.notify_all()
            holder = self._holders.setdefault(tree, cid)
        return None if holder == cid else holder

    def release(self, cid: str, tree: str) -> None:
        """``cid`` gives ``tree`` back: novelty sent that proposal back to mutate, and no
        event records it, so a resumed run would not hold it either."""
        with self._cond:
            if self._holders.get(tree) == cid:
                del self._holders[tree]

    def _earlier_open(self, index: int) -> bool:
        return any(i < index for i in self._open.values())
