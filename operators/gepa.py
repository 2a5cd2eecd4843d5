"""GEPA's parent choice: sample from the Pareto front of per-task train rewards.

GEPA (Agrawal et al. 2025, ``gepa-ai/gepa``, ``optimize(candidate_selection_strategy=
"pareto", frontier_type=...)``) keeps every candidate that is best on at least one
training instance, so a specialist that solves tasks nobody else solves is not lost to
an average. ``instance``: a candidate is on the front when it reaches the best reward on
some task; among those, one whose winning tasks are a strict subset of another's is
dropped, and the rest are drawn in proportion to the tasks they win. ``objective``: the
classic non-dominated set over the vectors of per-task rewards, drawn uniformly.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import RunView, SelectContext, Selection, SelectOperator

Matrix = dict[str, dict[str, float]]


def train_matrix(run: RunView) -> Matrix:
    """Per-task train rewards of every admitted candidate that has them."""
    out: Matrix = {}
    for c in run.admitted():
        rewards = run.rewards(c.id, "train")
        if rewards:
            out[c.id] = rewards
    return out


def _tasks(matrix: Matrix) -> list[str]:
    return sorted({t for rewards in matrix.values() for t in rewards})


def dominates(a: dict[str, float], b: dict[str, float], tasks: list[str]) -> bool:
    """``a`` is at least as good as ``b`` on every task and better on one (missing = 0)."""
    ge = all(a.get(t, 0.0) >= b.get(t, 0.0) for t in tasks)
    return ge and any(a.get(t, 0.0) > b.get(t, 0.0) for t in tasks)


def objective_front(matrix: Matrix) -> list[str]:
    """Candidates no other candidate dominates, in their original order."""
    tasks = _tasks(matrix)
    return [
        cid
        for cid, row in matrix.items()
        if not any(dominates(other, row, tasks) for oid, other in matrix.items() if oid != cid)
    ]


def instance_front(matrix: Matrix) -> dict[str, int]:
    """Front members and how many tasks each wins (reaches that task's best reward)."""
    tasks = _tasks(matrix)
    wins: dict[str, set[str]] = {cid: set() for cid in matrix}
    for t in tasks:
        best = max(row.get(t, 0.0) for row in matrix.values())
        for cid, row in matrix.items():
            if row.get(t, 0.0) == best:
                wins[cid].add(t)
    members = {cid: w for cid, w in wins.items() if w}
    kept = {
        cid: w
        for cid, w in members.items()
        if not any(w < other for oid, other in members.items() if oid != cid)
    }
    return {cid: len(w) for cid, w in kept.items()}


class ParetoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    frontier: Literal["instance", "objective"] = Field(
        "instance", description="instance: best on some task; objective: non-dominated vectors"
    )


class Pareto(SelectOperator):
    """GEPA's parent choice: a candidate from the Pareto front of per-task train rewards.

    Source: GEPA ``optimize`` (``candidate_selection_strategy="pareto"``, ``frontier_type``).
    """

    name = "pareto"
    Config = ParetoConfig
    config: ParetoConfig

    def select(self, ctx: SelectContext) -> Selection:
        matrix = train_matrix(ctx.run)
        if not matrix:
            raise ValueError("no admitted candidate with per-task train rewards to select from")
        if self.config.frontier == "objective":
            front = objective_front(matrix)
            pick = ctx.rng.choice(front)
            return Selection(parent=pick, reason=f"pareto (objective front of {len(front)})")
        wins = instance_front(matrix)
        ids = sorted(wins)
        pick = ctx.rng.choices(ids, weights=[wins[i] for i in ids], k=1)[0]
        return Selection(
            parent=pick,
            reason=f"pareto (instance front of {len(ids)}; best on {wins[pick]} task(s))",
        )
