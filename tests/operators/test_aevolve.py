"""A-Evolve's rollback after `patience` generations without improvement."""

from __future__ import annotations

import pytest

from rsiframe.operators.aevolve import Rollback, RollbackConfig
from tests.support.modelview import Run, cand, sctx


def chain(scores: list[float]) -> Run:
    """c0 .. cN, each the child of the one before, one per generation."""
    cands = [cand(f"c{i}", f"c{i - 1}" if i else None, i) for i in range(len(scores))]
    return Run(cands, gate={f"c{i}": s for i, s in enumerate(scores)})


@pytest.mark.parametrize(
    ("scores", "patience", "parent", "reason"),
    [
        ([0.1, 0.2, 0.3], 2, "c2", "newest state is the best (0.300)"),
        ([0.1, 0.4, 0.3], 2, "c2", "continue from c2 (gate 0.300; best c1 0.400, 1 of 2"),
        ([0.1, 0.4, 0.3, 0.2], 2, "c1", "rollback to c1 (gate 0.400): 2 generations without"),
        ([0.1, 0.4, 0.3, 0.2], 3, "c3", "continue from c3"),
        ([0.4, 0.4, 0.4], 2, "c0", "rollback to c0"),  # a tie is no improvement
    ],
)
def test_rollback_after_patience_generations_without_improvement(
    scores: list[float], patience: int, parent: str, reason: str
) -> None:
    sel = Rollback(RollbackConfig(patience=patience)).select(sctx(chain(scores)))
    assert sel.parent == parent and sel.reason.startswith(reason), sel.reason
