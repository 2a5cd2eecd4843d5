"""GEPA's Pareto select on synthetic run views: the objective and instance fronts."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from rsiframe.api import SelectContext
from rsiframe.operators.gepa import Pareto, ParetoConfig, dominates, instance_front, objective_front
from tests.support.gepaview import View, cand
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


# -- GEPA's dominance removal (issue 31, the audit's T-G3 and T-G5) -------------------


Matrix = dict[str, dict[str, float]]


def gepa_restated(matrix: Matrix) -> dict[str, int]:
    """GEPA's ``remove_dominated_programs`` and front frequencies, restated literally: a
    program is dominated when every front it is on holds one of the programs not yet
    removed; the lowest aggregate is tried first, and the scan restarts after a removal."""
    tasks = sorted({t for r in matrix.values() for t in r})
    fronts = {}
    for t in tasks:
        best = max(r.get(t, 0.0) for r in matrix.values())
        fronts[t] = {c for c, r in matrix.items() if r.get(t, 0.0) == best}
    agg = {c: sum(r.values()) / len(r) for c, r in matrix.items()}
    programs = sorted({p for f in fronts.values() for p in f}, key=lambda p: (agg[p], p))
    dominated: set[str] = set()
    found = True
    while found:
        found = False
        for y in programs:
            if y in dominated:
                continue
            rest = set(programs) - {y} - dominated
            if all(any(o in rest for o in f) for f in fronts.values() if y in f):
                dominated.add(y)
                found = True
                break
    kept = [p for p in programs if p not in dominated]
    return {p: sum(1 for f in fronts.values() if p in f) for p in kept}


def test_the_union_of_the_others_covers_a_member_appendix_a2() -> None:
    # A wins {t1, t2}, B {t2, t3}, C {t1, t3}; nobody solves t4. No member's wins are a
    # subset of another's (the rule before issue 31 kept all three), yet GEPA drops one:
    # each one's fronts are covered by the other two together.
    matrix = {
        "A": {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.0},
        "B": {"t1": 0.0, "t2": 1.0, "t3": 1.0, "t4": 0.0},
        "C": {"t1": 1.0, "t2": 0.0, "t3": 1.0, "t4": 0.0},
    }
    # equal aggregates are tried in id order: A goes (B and C cover it); t4's front holds all
    assert gepa_restated(matrix) == {"B": 3, "C": 3}
    assert instance_front(matrix) == {"B": 3, "C": 3}


def test_instance_front_is_gepas_dominance_removal_on_random_matrices() -> None:
    rng = random.Random(31)
    for _ in range(400):
        n, m = rng.randint(1, 7), rng.randint(1, 6)
        matrix = {
            f"c{i}": {f"t{j}": float(rng.choice([0, 0, 0.5, 1])) for j in range(m)}
            for i in range(n)
        }
        assert instance_front(matrix) == gepa_restated(matrix), matrix


def test_a_specialist_is_kept_and_drawn_in_proportion_to_its_fronts() -> None:
    # T-G5: c2 solves only t4, which nobody else solves; its mean is the lowest
    train = {
        "c0": {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.0},
        "c1": {"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 0.0},
        "c2": {"t1": 0.0, "t2": 0.0, "t3": 0.0, "t4": 1.0},
    }
    run = View([cand("c0"), cand("c1", "c0"), cand("c2", "c0")], train)
    assert instance_front(train) == {"c1": 3, "c2": 1}  # c0 is covered by c1
    op = Pareto(ParetoConfig())
    n = 4000
    picks = Counter(op.select(SelectContext(run, random.Random(s), 1)).parent for s in range(n))  # type: ignore[arg-type]
    assert set(picks) == {"c1", "c2"}
    assert abs(picks["c2"] / n - 1 / 4) < 0.03
