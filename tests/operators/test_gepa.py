"""GEPA's Pareto select on synthetic run views: the objective and instance fronts."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from rsiframe.api import SelectContext
from rsiframe.operators.gepa import Pareto, ParetoConfig, dominates, instance_front, objective_front
from tests.support.methodview import Run, view

# -- pareto ------------------------------------------------------------------------------


def brute_force_front(matrix: dict[str, dict[str, float]]) -> set[str]:
    tasks = sorted({t for r in matrix.values() for t in r})
    vec = {c: tuple(r.get(t, 0.0) for t in tasks) for c, r in matrix.items()}
    front = set()
    for c, v in vec.items():
        beaten = False
        for o, w in vec.items():
            if o != c and all(x >= y for x, y in zip(w, v, strict=True)) and w != v:
                beaten = True
        if not beaten:
            front.add(c)
    return front


def test_objective_front_matches_brute_force_on_random_matrices() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n, m = rng.randint(1, 7), rng.randint(1, 5)
        matrix = {
            f"c{i}": {f"t{j}": float(rng.choice([0, 0.5, 1])) for j in range(m)} for i in range(n)
        }
        assert set(objective_front(matrix)) == brute_force_front(matrix)


def test_instance_front_counts_wins_and_drops_subsumed_members() -> None:
    matrix = {
        "a": {"t1": 1.0, "t2": 1.0, "t3": 0.0},  # wins t1, t2
        "b": {"t1": 1.0, "t2": 0.0, "t3": 0.0},  # wins t1 only: a subset of a's wins
        "c": {"t1": 0.0, "t2": 0.0, "t3": 1.0},  # the specialist: wins t3
        "d": {"t1": 0.5, "t2": 0.5, "t3": 0.5},  # wins nothing
    }
    assert instance_front(matrix) == {"a": 2, "c": 1}
    assert dominates(matrix["a"], matrix["b"], ["t1", "t2", "t3"])


def test_pareto_select_keeps_the_specialist_and_follows_win_counts() -> None:
    cands = [view(c) for c in "abcd"]
    train = {
        "a": {"t1": 1.0, "t2": 1.0, "t3": 0.0},
        "b": {"t1": 1.0, "t2": 0.0, "t3": 0.0},
        "c": {"t1": 0.0, "t2": 0.0, "t3": 1.0},
        "d": {"t1": 0.5, "t2": 0.5, "t3": 0.5},
    }
    run = Run(cands, {c: 0.5 for c in "abcd"}, train_rewards=train)
    op = Pareto(ParetoConfig())
    picks = Counter(op.select(SelectContext(run, random.Random(s), 1)).parent for s in range(3000))
    assert set(picks) == {"a", "c"}
    assert abs(picks["a"] / 3000 - 2 / 3) < 0.04
    obj = Pareto(ParetoConfig(frontier="objective"))
    got = {obj.select(SelectContext(run, random.Random(s), 1)).parent for s in range(200)}
    assert got == brute_force_front(train) == {"a", "c", "d"}


def test_pareto_without_train_rewards_raises() -> None:
    run = Run([view("a")], {"a": 0.3})
    with pytest.raises(ValueError, match="per-task train rewards"):
        Pareto(ParetoConfig()).select(SelectContext(run, random.Random(0), 1))
