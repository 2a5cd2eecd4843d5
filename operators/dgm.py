"""The Darwin Gödel Machine's archive policy: score-and-children parent choice, keep every child.

DGM (Zhang et al. 2025, ``jennyzzt/dgm``, ``DGM_outer.py``) and HyperAgents draw a parent
with probability proportional to ``sigmoid(λ·(score - midpoint)) / (1 + children)``: good
candidates are favoured, and a candidate that already has many children is explored less.
Its archive keeps every valid child (``keep_all``), so later generations can branch from
stepping stones that did not improve on their parent.
"""

from __future__ import annotations

import math
from collections import Counter

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import (
    CandidateView,
    GateContext,
    GateDecision,
    GateOperator,
    RunView,
    SelectContext,
    Selection,
    SelectOperator,
)

#: candidate states that count as a child of their parent: in flight, kept or judged.
#: A child the guardrail or a failing operator rejected, or a crash abandoned, never
#: existed as a program, so it does not count (DGM counts only compiled children).
_CHILD_STATES = frozenset(
    {"proposed", "mutated", "evaluating", "certified", "admitted", "declined", "failed"}
)


def children_counts(run: RunView) -> Counter[str]:
    """Children per candidate, in-flight children included (steady mode sees them too)."""
    return Counter(
        c.parent for c in run.candidates() if c.parent is not None and c.state in _CHILD_STATES
    )


def score_child_weights(
    rows: list[tuple[str, float]], children: Counter[str], lam: float, midpoint: float
) -> dict[str, float]:
    """Normalised DGM weights: ``sigmoid(lam·(score - midpoint)) / (1 + children)``."""
    raw = {
        cid: (1.0 / (1.0 + math.exp(-lam * (score - midpoint)))) / (1 + children.get(cid, 0))
        for cid, score in rows
    }
    total = sum(raw.values())
    if total <= 0:  # every weight underflowed: fall back to uniform
        return {cid: 1.0 / len(raw) for cid in raw}
    return {cid: w / total for cid, w in raw.items()}


class ScoreChildPropConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lam: float = Field(10.0, ge=0, description="sigmoid steepness λ (0: scores ignored)")
    midpoint: float = Field(0.5, description="score at which the sigmoid is one half")


class ScoreChildProp(SelectOperator):
    """DGM's parent choice: p ∝ sigmoid(λ·(gate - midpoint)) / (1 + children).

    Children in flight count, so K proposals in steady mode spread over the archive.
    Source: DGM ``DGM_outer.py`` (choose_selfimproves, ``score_child_prop``); HyperAgents.
    """

    name = "score_child_prop"
    Config = ScoreChildPropConfig
    config: ScoreChildPropConfig

    def select(self, ctx: SelectContext) -> Selection:
        admitted: list[CandidateView] = ctx.run.admitted()
        rows = [(c.id, s) for c in admitted if (s := ctx.run.score(c.id, "gate")) is not None]
        if not rows:
            raise ValueError("no admitted candidate with a gate score to select from")
        kids = children_counts(ctx.run)
        weights = score_child_weights(rows, kids, self.config.lam, self.config.midpoint)
        ids = [cid for cid, _ in rows]
        pick = ctx.rng.choices(ids, weights=[weights[i] for i in ids], k=1)[0]
        score = dict(rows)[pick]
        return Selection(
            parent=pick,
            reason=f"score_child_prop p={weights[pick]:.3f} (gate {score:.3f}, "
            f"{kids.get(pick, 0)} children)",
        )


class KeepAll(GateOperator):
    """DGM's archive: every certified child joins the archive, better or not.

    Only candidates that passed the guardrail, validation and a full evaluation reach a
    gate, so this keeps every *valid* child as a possible stepping stone. Source: DGM
    ``DGM_outer.py`` (``update_archive`` with ``keep_all``).
    """

    name = "keep_all"
    deterministic = True

    def gate(self, ctx: GateContext) -> GateDecision:
        score = ctx.run.score(ctx.candidate.id, "gate")
        shown = "no gate score" if score is None else f"gate {score:.3f}"
        return GateDecision(admit=True, reason=f"keep_all: a valid child is kept ({shown})")
