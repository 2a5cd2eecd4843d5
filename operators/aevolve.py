"""select ``rollback`` (A-Evolve): evolve the workspace from its newest state; after
``patience`` generations without improvement, roll back to the last good state.

A-Evolve keeps an agent's whole workspace (its prompt, skills and memory files) in the
candidate, evolves it one state after the other, and returns to the best state seen when
the recent edits stopped paying. Here a state is an admitted candidate (with ``gate:
keep_all`` every valid child is one) and "good" is the gate score: the next child comes
from the newest admitted candidate, unless the best one is ``patience`` or more
generations older than it, in which case the best one is selected again (the rollback).

Source: A-Evolve (agentic evolution of an agent workspace with rollback on stagnation).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import SelectContext, Selection, SelectOperator


class RollbackConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    patience: int = Field(
        2, ge=1, description="generations without a better gate score before a rollback"
    )


class Rollback(SelectOperator):
    """The newest admitted state; the best one after ``patience`` generations without
    improvement (ties: the older state is the good one)."""

    name = "rollback"
    deterministic = True
    Config = RollbackConfig
    config: RollbackConfig

    def select(self, ctx: SelectContext) -> Selection:
        rows = [(ctx.run.score(c.id, "gate"), i, c) for i, c in enumerate(ctx.run.admitted())]
        scored = [(s, i, c) for s, i, c in rows if s is not None]
        if not scored:
            raise ValueError("no admitted candidate with a gate score to select from")
        best_score, _, best = max(scored, key=lambda r: (r[0], -r[1]))
        newest_score, _, newest = max(scored, key=lambda r: (r[2].generation, r[1]))
        stale = newest.generation - best.generation
        if newest.id == best.id:
            return Selection(
                parent=newest.id, reason=f"newest state is the best ({best_score:.3f})"
            )
        if stale >= self.config.patience:
            return Selection(
                parent=best.id,
                reason=(
                    f"rollback to {best.id} (gate {best_score:.3f}): {stale} generations "
                    f"without improvement (patience {self.config.patience})"
                ),
            )
        return Selection(
            parent=newest.id,
            reason=(
                f"continue from {newest.id} (gate {newest_score:.3f}; best {best.id} "
                f"{best_score:.3f}, {stale} of {self.config.patience} generations)"
            ),
        )
