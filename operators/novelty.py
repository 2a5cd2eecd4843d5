"""novelty ``tree_dedup``: reject a child whose tree equals an existing candidate's."""

from __future__ import annotations

from rsiframe.api import Check, NoveltyContext, NoveltyOperator


class TreeDedup(NoveltyOperator):
    """Rejects exact duplicates (same git tree) of any committed candidate."""

    name = "tree_dedup"
    deterministic = True

    def novelty(self, ctx: NoveltyContext) -> Check:
        if ctx.tree in ctx.run.trees():
            twin = next(c.id for c in ctx.run.candidates() if c.tree == ctx.tree)
            return Check(ok=False, reason=f"tree identical to candidate {twin}")
        return Check(ok=True)
