"""Select operators against a hand-made RunView: best, top-k, tournament, epsilon-greedy,
uniform."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from rsiframe.api import (
    NoConfig,
    SelectContext,
)
from rsiframe.operators.select import (
    Best,
    BestConfig,
    EpsilonGreedy,
    EpsilonGreedyConfig,
    Tournament,
    TournamentConfig,
    Uniform,
)
from tests.support.runview import POP, SCORES, FakeRun, cand


def sctx(seed: int = 0) -> SelectContext:
    return SelectContext(FakeRun(POP, SCORES), random.Random(seed), 1)


# -- select ----------------------------------------------------------------------------


def test_best_picks_the_top_admitted_and_breaks_ties_by_age() -> None:
    assert Best(BestConfig()).select(sctx()).parent == "c1"  # c3 is declined, c2 is younger


def test_best_top_k_spreads_over_the_k_best() -> None:
    picks = {Best(BestConfig(top_k=2)).select(sctx(s)).parent for s in range(40)}
    assert picks == {"c1", "c2"}


def test_tournament_size_one_is_uniform_and_full_size_is_best() -> None:
    full = {Tournament(TournamentConfig(size=10)).select(sctx(s)).parent for s in range(20)}
    assert full == {"c1"}
    one = Counter(Tournament(TournamentConfig(size=1)).select(sctx(s)).parent for s in range(400))
    assert set(one) == {"c0", "c1", "c2", "c4"}


def test_epsilon_greedy_extremes() -> None:
    greedy = {
        EpsilonGreedy(EpsilonGreedyConfig(epsilon=0)).select(sctx(s)).parent for s in range(30)
    }
    assert greedy == {"c1"}
    explore = Counter(
        EpsilonGreedy(EpsilonGreedyConfig(epsilon=1)).select(sctx(s)).parent for s in range(400)
    )
    assert set(explore) == {"c0", "c1", "c2", "c4"}


def test_uniform_never_picks_declined_and_is_deterministic() -> None:
    picks = [Uniform(NoConfig()).select(sctx(s)).parent for s in range(200)]
    assert "c3" not in picks and set(picks) == {"c0", "c1", "c2", "c4"}
    assert picks == [Uniform(NoConfig()).select(sctx(s)).parent for s in range(200)]


def test_select_with_nothing_admitted_raises() -> None:
    ctx = SelectContext(FakeRun([cand("c0", state="declined")], {"c0": 1.0}), random.Random(0), 1)
    with pytest.raises(ValueError, match="no admitted candidate"):
        Best(BestConfig()).select(ctx)
