"""The Darwin Gödel Machine's archive policy: score-and-children parent choice, keep every child.

DGM (Zhang et al. 2025, ``jennyzzt/dgm``, ``DGM_outer.py``, ``choose_selfimproves`` with
``score_child_prop``) draws a parent with probability proportional to
``sigmoid(λ·(score - midpoint)) / (1 + children)`` (λ = 10, midpoint 0.5): good candidates
are favoured, and a candidate that already has many children is explored less. DGM counts
the children in its archive (``children: archived``); the default here also counts
children in flight and judged ones, so K proposals in steady mode spread out. HyperAgents'
``select_parent`` differs (midpoint: the mean of the top three scores; penalty
``exp(-(children/8)**3)``): ``formula: hyperagents`` selects with it. A candidate a staged
evaluation archived at a stage (``on_fail: archive``) is drawn with that stage's score, as
DGM scores a child on what it was evaluated on. Its archive keeps every valid child (``keep_all``),
so later generations can branch from stepping stones that did not improve on their parent.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Literal

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


def children_counts(run: RunView, archived: bool = False) -> Counter[str]:
    """Children per candidate: in flight and judged ones included (steady mode sees them
    too), or (``archived``) only those in the archive, as DGM counts them."""
    states = frozenset({"admitted"}) if archived else _CHILD_STATES
    return Counter(c.parent for c in run.candidates() if c.parent is not None and c.state in states)


def archive_score(run: RunView, c: CandidateView, split: str) -> float | None:
    """``c``'s verified ``split`` score, or, for a candidate a staged evaluation archived
    at a stage, that stage's score (what DGM would rank it by)."""
    score = run.score(c.id, split)
    if score is None and c.stopped_at is not None:
        score = run.score(c.id, c.stopped_at)
    return score


def score_child_weights(
    rows: list[tuple[str, float]],
    children: Counter[str],
    lam: float,
    midpoint: float | str,
    scale: str = "none",
) -> dict[str, float]:
    """Normalised weights ``sigmoid(lam·(score - midpoint)/scale) / (1 + children)``: DGM's
    with a fixed midpoint and no scale; ShinkaEvolve's (``database/parents.py``) with
    ``midpoint="median"`` of the scores and ``scale="mad"``, their median absolute
    deviation (at least 1e-6, so equal scores do not divide by zero)."""
    scores = [score for _, score in rows]
    mid = statistics.median(scores) if midpoint == "median" else float(midpoint)
    spread = 1.0
    if scale == "mad":
        spread = max(statistics.median(abs(s - mid) for s in scores), 1e-6)
    raw = {
        cid: _sigmoid(lam * (score - mid) / spread) / (1 + children.get(cid, 0))
        for cid, score in rows
    }
    total = sum(raw.values())
    if total <= 0:  # every weight underflowed: fall back to uniform
        return {cid: 1.0 / len(raw) for cid in raw}
    return {cid: w / total for cid, w in raw.items()}


def hyperagents_weights(
    rows: list[tuple[str, float]], children: Counter[str], lam: float
) -> dict[str, float]:
    """Normalised HyperAgents weights: ``sigmoid(lam·(score - m)) · exp(-(children/8)^3)``
    with ``m`` the mean of the three best scores (adaptive, no tuned midpoint)."""
    top = sorted((s for _, s in rows), reverse=True)[:3]
    midpoint = sum(top) / len(top)
    raw = {
        cid: _sigmoid(lam * (score - midpoint)) * math.exp(-((children.get(cid, 0) / 8.0) ** 3))
        for cid, score in rows
    }
    total = sum(raw.values())
    if total <= 0:
        return {cid: 1.0 / len(raw) for cid in raw}
    return {cid: w / total for cid, w in raw.items()}


def _sigmoid(x: float) -> float:
    """A sigmoid that does not overflow for large ``|x|`` (MAD scaling makes them common)."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


class ScoreChildPropConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lam: float = Field(10.0, ge=0, description="sigmoid steepness λ (0: scores ignored)")
    midpoint: float | Literal["median"] = Field(
        0.5,
        description="score at which the sigmoid is one half; median: the median of the "
        "candidates' scores (ShinkaEvolve)",
    )
    scale: Literal["none", "mad"] = Field(
        "none",
        description="divide score - midpoint by: nothing (DGM), or the scores' median "
        "absolute deviation (ShinkaEvolve)",
    )
    formula: Literal["dgm", "hyperagents"] = Field(
        "dgm",
        description="dgm: sigmoid(λ(s - midpoint))/(1 + n); hyperagents: midpoint = mean of "
        "the top-3 scores, penalty exp(-(n/8)^3)",
    )
    split: Literal["gate", "train"] = Field(
        "gate", description="the score drawn on (DGM: what it was evaluated on, train)"
    )
    children: Literal["all", "archived"] = Field(
        "all", description="children counted: all proposed and judged, or archived (DGM)"
    )


class ScoreChildProp(SelectOperator):
    """DGM's parent choice: p ∝ sigmoid(λ·(score - midpoint)) / (1 + children).

    By default children in flight count, so K proposals in steady mode spread over the
    archive; ``children: archived`` counts the archive's children only (DGM).
    Source: DGM ``DGM_outer.py`` (choose_selfimproves, ``score_child_prop``).
    """

    name = "score_child_prop"
    Config = ScoreChildPropConfig
    config: ScoreChildPropConfig

    def select(self, ctx: SelectContext) -> Selection:
        cfg = self.config
        admitted: list[CandidateView] = ctx.run.admitted()
        scored = [(c.id, archive_score(ctx.run, c, cfg.split)) for c in admitted]
        rows = [(cid, s) for cid, s in scored if s is not None]
        if not rows:
            raise ValueError(f"no admitted candidate with a {cfg.split} score to select from")
        kids = children_counts(ctx.run, archived=cfg.children == "archived")
        if cfg.formula == "hyperagents":
            weights = hyperagents_weights(rows, kids, cfg.lam)
        else:
            weights = score_child_weights(rows, kids, cfg.lam, cfg.midpoint, cfg.scale)
        ids = [cid for cid, _ in rows]
        pick = ctx.rng.choices(ids, weights=[weights[i] for i in ids], k=1)[0]
        score = dict(rows)[pick]
        return Selection(
            parent=pick,
            reason=f"score_child_prop p={weights[pick]:.3f} ({cfg.split} {score:.3f}, "
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
