"""A-Evolve's rollback after `patience` generations without improvement."""

from __future__ import annotations

import random

import pytest

from rsiframe.api import SearchConverged, SelectContext
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


def test_a_rollback_resets_the_patience_counter() -> None:
    """Appendix A1: c4 is the rollback's child of c1 (gen 4); the next proposal continues
    from c4, and only after ``patience`` generations of its own rolls back again."""
    cands = [cand(f"c{i}", f"c{i - 1}" if i else None, i) for i in range(4)]
    run = Run(
        [*cands, cand("c4", "c1", 4)], gate={"c0": 0.1, "c1": 0.4, "c2": 0.3, "c3": 0.2, "c4": 0.35}
    )
    op = Rollback(RollbackConfig(patience=2))
    sel = op.select(sctx(run))
    assert sel.parent == "c4", sel.reason
    assert "0 of 2 generations" in sel.reason
    run = Run(
        [*cands, cand("c4", "c1", 4), cand("c5", "c4", 5)],
        gate={"c0": 0.1, "c1": 0.4, "c2": 0.3, "c3": 0.2, "c4": 0.35, "c5": 0.3},
    )
    assert op.select(sctx(run)).parent == "c5"
    run = Run(
        [*cands, cand("c4", "c1", 4), cand("c5", "c4", 5), cand("c6", "c5", 6)],
        gate={"c0": 0.1, "c1": 0.4, "c2": 0.3, "c3": 0.2, "c4": 0.35, "c5": 0.3, "c6": 0.3},
    )
    sel = op.select(sctx(run))
    assert sel.parent == "c1" and sel.reason.startswith("rollback to c1"), sel.reason


def test_a_rollback_whose_child_failed_selects_the_rolled_back_state_again() -> None:
    cands = [cand(f"c{i}", f"c{i - 1}" if i else None, i) for i in range(4)]
    run = Run(
        [*cands, cand("c4", "c1", 4, state="rejected")],
        gate={"c0": 0.1, "c1": 0.4, "c2": 0.3, "c3": 0.2},
    )
    sel = Rollback(RollbackConfig(patience=2)).select(sctx(run))
    assert sel.parent == "c1" and "rolled-back state" in sel.reason


@pytest.mark.parametrize(
    ("scores", "config", "parent", "reason"),
    [
        # A-Evolve's degradation condition: best 0.95 >= ceiling, newest lost <= 5 %
        ([0.5, 0.95, 0.93, 0.92], {}, "c3", "continue from c3"),
        ([0.5, 0.95, 0.93, 0.92], {"ceiling": None}, "c1", "rollback to c1"),
        ([0.5, 0.95, 0.93, 0.85], {}, "c1", "rollback to c1"),  # lost more than 5 %
        ([0.5, 0.8, 0.78, 0.77], {}, "c1", "rollback to c1"),  # best below the ceiling
        # a gain under the threshold is no improvement: c3's patience counts from c1
        ([0.5, 0.6, 0.55, 0.61], {"threshold": 0.05, "ceiling": None}, "c3", "newest state"),
        ([0.5, 0.6, 0.55, 0.61, 0.58], {"threshold": 0.05, "ceiling": None}, "c3", "rollback"),
        ([0.5, 0.6, 0.55, 0.61, 0.58], {"ceiling": None}, "c4", "continue from c4"),
    ],
)
def test_threshold_and_degradation_condition(
    scores: list[float], config: dict, parent: str, reason: str
) -> None:
    sel = Rollback(RollbackConfig(patience=2, **config)).select(sctx(chain(scores)))
    assert sel.parent == parent and sel.reason.startswith(reason), sel.reason
    if "continue" in reason and not config:
        assert "no rollback: within 5% of a best at the ceiling" in sel.reason


@pytest.mark.parametrize(
    ("scores", "window", "epsilon", "converged"),
    [
        ([0.1, 0.5, 0.5, 0.5], 2, 0.01, True),  # nothing gained in the last 2 generations
        ([0.1, 0.5, 0.5, 0.52], 2, 0.01, False),
        ([0.1, 0.5, 0.5, 0.505], 2, 0.01, True),  # a gain below epsilon
        ([0.1, 0.5], 2, 0.01, False),  # not yet a window of history
    ],
)
def test_convergence_stop(
    scores: list[float], window: int, epsilon: float, converged: bool
) -> None:
    op = Rollback(RollbackConfig(converge={"window": window, "epsilon": epsilon}))
    ctx = SelectContext(run=chain(scores), rng=random.Random(0), generation=len(scores))  # type: ignore[arg-type]
    if converged:
        with pytest.raises(SearchConverged, match=f"in the last {window} generations"):
            op.select(ctx)
    else:
        assert op.select(ctx).parent
