"""The statistics behind compare and fidelity, against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from rsiframe.study.stats import bootstrap_ci, mcnemar, quantile


def test_quantile_interpolates_linearly_like_numpy() -> None:
    assert quantile([1, 2, 3, 4], 0.5) == 2.5
    assert quantile([1, 2, 3, 4], 0.25) == 1.75
    assert quantile([1, 2, 3, 4], 0.0) == 1 and quantile([1, 2, 3, 4], 1.0) == 4
    assert quantile([7], 0.9) == 7


def test_bootstrap_ci_of_a_proportion_matches_the_normal_approximation() -> None:
    est = bootstrap_ci([1.0] * 50 + [0.0] * 50)
    assert est.mean == 0.5 and est.n == 100
    # se = sqrt(.25 / 100) = 0.05, so the 95 % interval is about 0.5 ± 0.098
    assert est.lo == pytest.approx(0.402, abs=0.015)
    assert est.hi == pytest.approx(0.598, abs=0.015)


def test_bootstrap_ci_is_degenerate_for_one_value_or_identical_values() -> None:
    assert bootstrap_ci([0.3]) == bootstrap_ci([0.3])
    one = bootstrap_ci([0.3])
    assert (one.mean, one.lo, one.hi, one.n) == (0.3, 0.3, 0.3, 1)
    same = bootstrap_ci([0.25, 0.25, 0.25])
    assert (same.lo, same.hi) == (0.25, 0.25)


def test_bootstrap_ci_is_deterministic_and_contains_the_mean() -> None:
    vals = [0.1, 0.4, 0.35, 0.8, 0.2]
    a, b = bootstrap_ci(vals), bootstrap_ci(vals)
    assert a == b
    assert a.lo < a.mean < a.hi
    assert a.lo >= min(vals) and a.hi <= max(vals)


def test_mcnemar_exact_p_values() -> None:
    # b = 10, c = 2: two-sided p = 2 * P(X >= 10 | n = 12) = 2 * (66 + 12 + 1) / 4096
    first = [True] * 10 + [False] * 2 + [True] * 5 + [False] * 7
    second = [False] * 10 + [True] * 2 + [True] * 5 + [False] * 7
    m = mcnemar(first, second)
    assert (m.b, m.c) == (10, 2)
    assert m.p_two_sided == pytest.approx(158 / 4096)
    assert m.p_greater == pytest.approx(79 / 4096)
    # the other direction: b = 2, c = 10; one-sided p(b > c) = P(X >= 2 | 12)
    r = mcnemar(second, first)
    assert r.p_two_sided == m.p_two_sided
    assert r.p_greater == pytest.approx(1 - 13 / 4096)


def test_mcnemar_without_discordant_pairs_is_one() -> None:
    m = mcnemar([True, False, True], [True, False, True])
    assert (m.b, m.c, m.p_two_sided, m.p_greater) == (0, 0, 1.0, 1.0)
    balanced = mcnemar([True] * 5 + [False] * 5, [False] * 5 + [True] * 5)
    assert balanced.p_two_sided == 1.0
    assert math.isclose(balanced.p_greater, 638 / 1024)
