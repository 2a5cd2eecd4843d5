"""select ``rollback`` (A-Evolve): evolve the workspace from its current state; after
``patience`` generations without improvement, roll back to the last good state.

A-Evolve keeps an agent's whole workspace (its prompt, skills and memory files) in the
candidate, evolves it one state after the other, and returns to the best state seen when
the recent edits stopped paying. Here a state is an admitted candidate (with ``gate:
keep_all`` every valid child is one) and "good" is the gate score: the next child comes
from the newest admitted candidate, unless the last improvement of at least
``threshold`` is ``patience`` or more generations old, in which case the best one is
selected again (the rollback). A rollback resets the counter, as A-Evolve's does: the
state it made is evolved for ``patience`` generations of its own before the next one.
There is no rollback while the current state is within ``degradation`` of a best that
reached ``ceiling`` (A-Evolve's degradation condition: near the top, a small dip is not
stagnation). ``converge`` ends the run (``finished``, with the reason) when the last
``window`` generations raised the best score by less than ``epsilon``.

Everything is derived from the run's history, so a resumed run selects as the first
process would: a child was made by a rollback when its parent is not the state that was
current when it was proposed.

Source: A-Evolve (agentic evolution of an agent workspace with rollback on stagnation).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import (
    CandidateView,
    RunView,
    SearchConverged,
    SelectContext,
    Selection,
    SelectOperator,
)


class ConvergeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    window: int = Field(ge=1, description="generations looked back over")
    epsilon: float = Field(1e-6, gt=0, description="a gain of the best below this is none")


class RollbackConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    patience: int = Field(
        2, ge=1, description="generations without a better gate score before a rollback"
    )
    threshold: float = Field(
        0.0, ge=0, description="the least gain over the best so far that counts as improvement"
    )
    degradation: float = Field(
        0.05, ge=0, le=1, description="no rollback when the state is this close to the best ..."
    )
    ceiling: float | None = Field(
        0.9, description="... and the best reached this (None: always roll back)"
    )
    converge: ConvergeConfig | None = Field(
        None, description="end the run when the best stopped moving (A-Evolve's convergence)"
    )


@dataclass(frozen=True)
class History:
    """What the run's history says: the states in order, the improvements, the rollbacks."""

    states: list[tuple[float, CandidateView]]  # admitted with a gate score, oldest first
    best: tuple[float, CandidateView]
    improved_gen: int  # the generation of the last improvement of at least the threshold
    rollback: CandidateView | None  # the newest child a rollback made

    @property
    def newest(self) -> tuple[float, CandidateView]:
        return self.states[-1]


def history(run: RunView, threshold: float) -> History:
    order = {c.id: i for i, c in enumerate(run.candidates())}
    states = sorted(
        ((s, c) for c in run.admitted() if (s := run.score(c.id, "gate")) is not None),
        key=lambda r: (r[1].generation, order[r[1].id]),
    )
    if not states:
        raise ValueError("no admitted candidate with a gate score to select from")
    best, improved_gen = states[0], states[0][1].generation
    for s, c in states[1:]:
        if s > best[0]:
            if s >= best[0] + threshold:
                improved_gen = c.generation
            best = (s, c)
    rollbacks = [c for c in run.candidates() if _made_by_rollback(c, states)]
    rollback = max(rollbacks, key=lambda c: (c.generation, order[c.id]), default=None)
    return History(states, best, improved_gen, rollback)


def _made_by_rollback(c: CandidateView, states: list[tuple[float, CandidateView]]) -> bool:
    """Its parent is not the newest state of an earlier generation (a merge never is)."""
    if c.parent is None or len(c.parents) > 1:
        return False
    before = [s for s in states if s[1].generation < c.generation]
    return bool(before) and before[-1][1].id != c.parent


class Rollback(SelectOperator):
    """The current state; the best one after ``patience`` generations without
    improvement (ties: the older state is the good one)."""

    name = "rollback"
    deterministic = True
    Config = RollbackConfig
    config: RollbackConfig

    def select(self, ctx: SelectContext) -> Selection:
        h = history(ctx.run, self.config.threshold)
        self._check_converged(h, ctx.generation)
        (best_score, best), (newest_score, newest) = h.best, h.newest
        rolled = h.rollback.generation if h.rollback else -1
        if rolled > newest.generation and h.rollback and h.rollback.parent:
            # the rollback's child was not admitted: the workspace is still the best state
            return Selection(parent=h.rollback.parent, reason="again from the rolled-back state")
        if newest.id == best.id:
            return Selection(
                parent=newest.id, reason=f"newest state is the best ({best_score:.3f})"
            )
        stale = newest.generation - max(h.improved_gen, rolled)
        status = f"{stale} of {self.config.patience} generations"
        if stale >= self.config.patience and not self._near_ceiling(best_score, newest_score):
            return Selection(
                parent=best.id,
                reason=(
                    f"rollback to {best.id} (gate {best_score:.3f}): {stale} generations "
                    f"without improvement (patience {self.config.patience})"
                ),
            )
        if stale >= self.config.patience:
            status = f"no rollback: within {self.config.degradation:.0%} of a best at the ceiling"
        return Selection(
            parent=newest.id,
            reason=(
                f"continue from {newest.id} (gate {newest_score:.3f}; best {best.id} "
                f"{best_score:.3f}, {status})"
            ),
        )

    def _near_ceiling(self, best: float, newest: float) -> bool:
        """A-Evolve's degradation condition: the best reached the ceiling and the current
        state lost at most ``degradation`` of it."""
        ceiling = self.config.ceiling
        return (
            ceiling is not None
            and best >= ceiling
            and newest >= best * (1 - self.config.degradation)
        )

    def _check_converged(self, h: History, generation: int) -> None:
        """Before proposing into ``generation``: did the last ``window`` generations (the
        ones before it) raise the best score by ``epsilon``?"""
        conv = self.config.converge
        if conv is None or generation - 1 < conv.window:
            return
        before = [s for s, c in h.states if c.generation < generation - conv.window]
        gain = h.best[0] - max(before, default=h.best[0])
        if before and gain < conv.epsilon:
            raise SearchConverged(
                f"converged: the best gate score rose {gain:.4f} in the last {conv.window} "
                f"generations (epsilon {conv.epsilon})"
            )
