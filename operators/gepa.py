"""GEPA's parent choice: sample from the Pareto front of per-task train rewards.

GEPA (Agrawal et al. 2025, ``gepa-ai/gepa``, ``optimize(candidate_selection_strategy=
"pareto", frontier_type=...)``) keeps every candidate that is best on at least one
training instance, so a specialist that solves tasks nobody else solves is not lost to
an average. ``instance``: each task's front is the candidates that reach its best reward;
GEPA's dominance removal (``remove_dominated_programs``) then drops, lowest aggregate
first and again after each drop, a candidate every one of whose fronts also holds another
candidate still kept (the union of the others covers it); the rest are drawn in
proportion to the fronts they are on. ``objective``: the classic non-dominated set over
the vectors of per-task rewards, drawn uniformly.
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


def task_fronts(matrix: Matrix) -> dict[str, set[str]]:
    """Per task, the candidates that reach its best reward (missing = 0)."""
    fronts = {}
    for t in _tasks(matrix):
        best = max(row.get(t, 0.0) for row in matrix.values())
        fronts[t] = {cid for cid, row in matrix.items() if row.get(t, 0.0) == best}
    return fronts


def dominators(fronts: dict[str, set[str]], aggregate: dict[str, float]) -> list[str]:
    """GEPA's dominance removal: in ascending aggregate order (ids break ties), drop the
    first candidate whose every front holds another candidate not dropped, and start
    over, until none can be dropped. Every front keeps at least one member."""
    order = sorted({c for f in fronts.values() for c in f}, key=lambda c: (aggregate[c], c))
    dropped: set[str] = set()

    def covered(y: str) -> bool:
        others = set(order) - dropped - {y}
        return all(f & others for f in fronts.values() if y in f)

    while (y := next((c for c in order if c not in dropped and covered(c)), None)) is not None:
        dropped.add(y)
    return [c for c in order if c not in dropped]


def instance_front(matrix: Matrix) -> dict[str, int]:
    """Front members after GEPA's dominance removal, and how many task fronts each is on."""
    fronts = task_fronts(matrix)
    aggregate = {cid: sum(row.values()) / len(row) if row else 0.0 for cid, row in matrix.items()}
    kept = dominators(fronts, aggregate)
    return {cid: sum(cid in f for f in fronts.values()) for cid in kept}


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
