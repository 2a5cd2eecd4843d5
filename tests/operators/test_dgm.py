"""DGM's policies on synthetic run views: score_child_prop and keep_all."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from rsiframe.api import CandidateView, GateContext, SelectContext
from rsiframe.operators.dgm import (
    KeepAll,
    ScoreChildProp,
    ScoreChildPropConfig,
    children_counts,
    score_child_weights,
)
from tests.support.methodview import Run, view

# -- score_child_prop -------------------------------------------------------------------


def test_score_child_prop_probabilities_match_the_formula() -> None:
    cands = [
        view("c0"),
        view("c1", "c0"),
        view("c2", "c0"),
        view("c3", "c1", state="evaluating"),  # in flight: counts as c1's child
        view("c4", "c1", state="rejected"),  # never existed as a program: not counted
        view("c5", "c0", state="declined"),
    ]
    gate = {"c0": 0.2, "c1": 0.6, "c2": 0.45}
    run = Run(cands, gate)
    kids = children_counts(run)
    assert kids == Counter({"c0": 3, "c1": 1})

    def expect(score: float, children: int) -> float:
        return 1 / (1 + math.exp(-10 * (score - 0.5))) / (1 + children)

    raw = {"c0": expect(0.2, 3), "c1": expect(0.6, 1), "c2": expect(0.45, 0)}
    want = {k: v / sum(raw.values()) for k, v in raw.items()}
    got = score_child_weights([(c, gate[c]) for c in ("c0", "c1", "c2")], kids, 10.0, 0.5)
    assert got == pytest.approx(want)

    op = ScoreChildProp(ScoreChildPropConfig())
    n = 6000
    picks = Counter(op.select(SelectContext(run, random.Random(s), 1)).parent for s in range(n))
    for cid, p in want.items():
        assert abs(picks[cid] / n - p) < 0.03, (cid, picks[cid] / n, p)


def test_score_child_prop_lambda_zero_ignores_scores() -> None:
    run = Run([view("a"), view("b", "a")], {"a": 0.0, "b": 1.0})
    w = score_child_weights([("a", 0.0), ("b", 1.0)], children_counts(run), 0.0, 0.5)
    assert w == pytest.approx({"a": 0.5 / 1.5, "b": 1 / 1.5})


def test_score_child_prop_with_median_and_mad_is_shinkaevolves_formula() -> None:
    """sigmoid(λ·(score - median)/MAD) / (1 + children) (ShinkaEvolve database/parents.py)."""
    cands = [view("c0"), view("c1", "c0"), view("c2", "c0"), view("c3", "c1"), view("c4", "c1")]
    gate = {"c0": 0.2, "c1": 0.5, "c2": 0.55, "c3": 0.9, "c4": 0.52}
    run = Run(cands, gate)
    kids = children_counts(run)  # c0: 2, c1: 2
    median = 0.52  # of 0.2, 0.5, 0.52, 0.55, 0.9
    mad = 0.03  # median of |s - median|: 0.32, 0.02, 0, 0.03, 0.38

    def expect(score: float, children: int) -> float:
        return 1 / (1 + math.exp(-10 * (score - median) / mad)) / (1 + children)

    raw = {c: expect(gate[c], kids.get(c, 0)) for c in gate}
    want = {k: v / sum(raw.values()) for k, v in raw.items()}
    rows = [(c, gate[c]) for c in gate]
    assert score_child_weights(rows, kids, 10.0, "median", "mad") == pytest.approx(want)
    op = ScoreChildProp(ScoreChildPropConfig(midpoint="median", scale="mad"))
    n = 4000
    picks = Counter(op.select(SelectContext(run, random.Random(s), 1)).parent for s in range(n))
    for cid, p in want.items():
        assert abs(picks[cid] / n - p) < 0.03, (cid, picks[cid] / n, p)
    # equal scores: MAD 0 is floored (no division by zero), children alone decide
    flat = score_child_weights([("a", 0.5), ("b", 0.5)], Counter({"a": 1}), 10.0, "median", "mad")
    assert flat == pytest.approx({"a": 1 / 3, "b": 2 / 3})


def test_keep_all_admits_every_certified_child() -> None:
    run = Run([view("c0"), view("c1", "c0")], {"c0": 0.9, "c1": 0.1})
    ctx = GateContext(run, random.Random(0), 1, view("c1", "c0"), view("c0"))
    decision = KeepAll(KeepAll.Config()).gate(ctx)
    assert decision.admit and "0.100" in decision.reason


# -- DGM's archive: stage scores, archived children (issue 31, the audit's T-D1) ------


def cand(cid: str, parent: str | None = None, state: str = "admitted", stop: str | None = None):
    return CandidateView(cid, parent, 1, state, "c" * 40, cid, stopped_at=stop)


class View:
    lessons = ""

    def __init__(self, cands: list[CandidateView], scores: dict[tuple[str, str], float]) -> None:
        self._c, self._s = {c.id: c for c in cands}, scores

    def candidates(self) -> list[CandidateView]:
        return list(self._c.values())

    def admitted(self) -> list[CandidateView]:
        return [c for c in self._c.values() if c.state == "admitted"]

    def score(self, cid: str, split: str) -> float | None:
        return self._s.get((cid, split))


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_a_child_stopped_at_stage_one_is_drawn_with_its_stage_score() -> None:
    # T-D1: c2 was archived at train@1 with 0.1 (no train score); c3 is in flight and c4 was
    # rejected: DGM counts only archived children
    cands = [
        cand("c0"),
        cand("c1", "c0"),
        cand("c2", "c0", stop="train@1"),
        cand("c3", "c1", state="evaluating"),
        cand("c4", "c1", state="rejected"),
    ]
    scores = {("c0", "train"): 0.5, ("c1", "train"): 0.7, ("c2", "train@1"): 0.1}
    run = View(cands, scores)
    assert children_counts(run, archived=True) == Counter({"c0": 2})  # type: ignore[arg-type]
    raw = {
        "c0": sigmoid(10 * (0.5 - 0.5)) / 3,
        "c1": sigmoid(10 * (0.7 - 0.5)) / 1,
        "c2": sigmoid(10 * (0.1 - 0.5)) / 1,
    }
    want = {k: v / sum(raw.values()) for k, v in raw.items()}
    op = ScoreChildProp(ScoreChildPropConfig(split="train", children="archived"))
    n = 8000
    picks = Counter(
        op.select(SelectContext(run, random.Random(s), 1)).parent  # type: ignore[arg-type]
        for s in range(n)
    )
    for cid, p in want.items():
        assert abs(picks[cid] / n - p) < 0.02, (cid, picks[cid] / n, p)


def test_score_child_prop_hyperagents_formula() -> None:
    """HyperAgents' select_parent: midpoint = mean of the top-3 scores, child penalty
    exp(-(n/8)^3), not DGM's fixed midpoint and 1/(1 + n)."""
    from rsiframe.operators.dgm import hyperagents_weights

    gate = {"c0": 0.2, "c1": 0.6, "c2": 0.45, "c3": 0.9}
    kids = Counter({"c0": 9, "c1": 4})
    mid = (0.9 + 0.6 + 0.45) / 3

    def expect(score: float, n: int) -> float:
        return 1 / (1 + math.exp(-10 * (score - mid))) * math.exp(-((n / 8) ** 3))

    raw = {c: expect(s, kids.get(c, 0)) for c, s in gate.items()}
    want = {k: v / sum(raw.values()) for k, v in raw.items()}
    got = hyperagents_weights(list(gate.items()), kids, 10.0)
    assert got == pytest.approx(want)
    assert got != pytest.approx(score_child_weights(list(gate.items()), kids, 10.0, 0.5))
    # four children cost HyperAgents ~12 % of the weight, DGM 80 %
    assert math.exp(-((4 / 8) ** 3)) == pytest.approx(0.8825, abs=1e-4)
    # the operator draws with it
    cands = [view("c0"), view("c1", "c0"), view("c2", "c0"), view("c3", "c1")]
    run = Run(cands, gate)
    op = ScoreChildProp(ScoreChildPropConfig(formula="hyperagents"))
    kids_run = children_counts(run)
    want_run = hyperagents_weights(list(gate.items()), kids_run, 10.0)
    n = 6000
    picks = Counter(op.select(SelectContext(run, random.Random(s), 1)).parent for s in range(n))
    for cid, p in want_run.items():
        assert abs(picks[cid] / n - p) < 0.03, (cid, picks[cid] / n, p)
