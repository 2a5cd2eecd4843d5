"""compare's statistics (rsiframe/study/inference.py) against brute force and hand computations."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from rsiframe.study.inference import (
    EXACT_UP_TO,
    difference_ci,
    holm,
    runs_needed,
    sign_flip,
    sign_flip_floor,
    two_level_ci,
    two_sample,
    two_sample_floor,
)

# -- the exact tests against a brute-force restatement --------------------------------------


def brute_sign_flip(diffs: list[float]) -> float:
    """Every sign vector over every pair (ties included), counted with exact fractions."""
    from fractions import Fraction

    d = [Fraction(x).limit_denominator(10**6) for x in diffs]
    observed = abs(sum(d))
    flips = list(itertools.product((1, -1), repeat=len(d)))
    return sum(abs(sum(s * x for s, x in zip(f, d, strict=True))) >= observed for f in flips) / len(
        flips
    )


@pytest.mark.parametrize(
    "diffs",
    [
        [0.0, 1 / 12, 1 / 12],  # the issue's three seeds
        [0.1, 0.2, -0.05, 0.3, 0.15],
        [0.25, 0.25, 0.25, 0.25, 0.25, 0.25],
        [1 / 12, -1 / 12, 1 / 6, 0.0, 1 / 12, 1 / 4, -1 / 6, 1 / 12],
        [0.5],
        [0.0, 0.0],
    ],
)
def test_sign_flip_equals_brute_force(diffs: list[float]) -> None:
    result = sign_flip(diffs)
    assert result.exact
    assert result.p == pytest.approx(brute_sign_flip(diffs), abs=1e-12)


def test_sign_flip_on_random_diffs_equals_brute_force() -> None:
    rng = random.Random(5)
    for _ in range(20):
        n = rng.randint(1, 10)
        diffs = [rng.choice((0, 1, 2, 3, -1, -2)) / 12 for _ in range(n)]
        assert sign_flip(diffs).p == pytest.approx(brute_sign_flip(diffs), abs=1e-12)


def test_sign_flip_smallest_p_is_what_so_few_pairs_allow() -> None:
    issue = sign_flip([0.0, 1 / 12, 1 / 12])  # two of three seeds differ, one task each
    assert (issue.p, issue.p_min, issue.units, issue.differ) == (0.5, 0.5, 3, 2)
    five = sign_flip([0.1, 0.2, 0.1, 0.3, 0.1])  # all one way: the smallest p there is
    assert five.p == five.p_min == 2 / 32  # above 0.05: five seeds can never decide
    six = sign_flip([0.1] * 6)
    assert six.p == six.p_min == 2 / 64
    assert sign_flip([0.0, 0.0, 0.0]).p == 1.0


def test_sign_flip_beyond_the_exact_limit_is_a_monte_carlo_estimate() -> None:
    rng = random.Random(1)
    diffs = [rng.gauss(0.05, 0.1) for _ in range(EXACT_UP_TO + 4)]
    result = sign_flip(diffs)
    assert not result.exact
    # the exact value by enumeration (2^20 sums) for comparison
    sums = [0.0]
    for d in diffs:
        sums = [s + d for s in sums] + [s - d for s in sums]
    exact = sum(abs(s) >= abs(sum(diffs)) - 1e-9 for s in sums) / len(sums)
    assert result.p == pytest.approx(exact, abs=0.01)


def brute_two_sample(a: list[float], b: list[float]) -> tuple[float, float]:
    """p and the smallest p over every labelling of the pooled values."""
    pooled, na = a + b, len(a)

    def diff(idx: tuple[int, ...]) -> float:
        sa = [pooled[i] for i in idx]
        sb = [pooled[i] for i in range(len(pooled)) if i not in idx]
        return sum(sa) / len(sa) - sum(sb) / len(sb)

    stats = [abs(diff(c)) for c in itertools.combinations(range(len(pooled)), na)]
    observed = abs(sum(a) / len(a) - sum(b) / len(b))

    def p_of(x: float) -> float:
        return sum(s >= x - 1e-9 for s in stats) / len(stats)

    return p_of(observed), min(p_of(s) for s in stats)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([0.6, 0.7, 0.65], [0.5, 0.55, 0.5, 0.6]),
        ([0.5, 0.5, 0.75], [0.5, 0.5, 0.5]),  # ties at the boundary
        ([1.0, 0.0], [0.5, 0.5, 0.5]),
        ([0.2, 0.4, 0.6, 0.8], [0.3, 0.5, 0.7, 0.9]),
    ],
)
def test_two_sample_equals_brute_force(a: list[float], b: list[float]) -> None:
    result = two_sample(a, b)
    p, p_min = brute_two_sample(a, b)
    assert result.exact
    assert result.p == pytest.approx(p, abs=1e-12)
    assert result.p_min == pytest.approx(p_min, abs=1e-12)


def test_two_sample_of_identical_values_is_one() -> None:
    result = two_sample([0.5, 0.5], [0.5, 0.5, 0.5])
    assert (result.p, result.p_min) == (1.0, 1.0)


# -- Holm, against a hand computation --------------------------------------------------------


def test_holm_by_hand() -> None:
    # sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # pairs without a test are not counted: m = 2
    assert holm([0.02, None, 0.6]) == [pytest.approx(0.04), None, pytest.approx(0.6)]
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm([]) == []


# -- the plan, against the closed-form normal approximation ----------------------------------

Z_975, Z_80 = 1.959963984540054, 0.8416212335729143


@pytest.mark.parametrize(
    ("delta", "sd"), [(0.1, 0.15), (0.05, 0.1), (-0.2, 0.1), (1 / 18, math.sqrt(1 / 432))]
)
def test_runs_needed_is_the_normal_approximation(delta: float, sd: float) -> None:
    expected = math.ceil((Z_975 + Z_80) ** 2 * sd**2 / delta**2)
    assert runs_needed(delta, sd**2) == expected


def test_runs_needed_by_hand() -> None:
    # (1.96 + 0.8416)^2 = 7.849; x 0.15^2 / 0.1^2 = 17.66 -> 18 runs per method
    assert runs_needed(0.1, 0.15**2) == 18
    with pytest.raises(ValueError):
        runs_needed(0.0, 0.01)
    with pytest.raises(ValueError):
        runs_needed(0.1, 0.0)


def test_exact_floors() -> None:
    assert sign_flip_floor(0.05) == 6  # 2/2^5 = 0.0625, 2/2^6 = 0.031
    assert two_sample_floor(0.05) == 4  # 2/C(6,3) = 0.1, 2/C(8,4) = 0.029


# -- the two-level bootstrap ------------------------------------------------------------------


def test_one_run_is_the_bootstrap_over_its_tasks() -> None:
    est = two_level_ci([{f"t{i}": float(i < 50) for i in range(100)}])
    assert est.mean == 0.5 and est.n == 1
    # se = sqrt(.25 / 100) = 0.05: about 0.5 +- 0.098
    assert est.lo == pytest.approx(0.402, abs=0.015)
    assert est.hi == pytest.approx(0.598, abs=0.015)


def test_seeds_that_agree_do_not_hide_the_task_uncertainty() -> None:
    run = {f"t{i}": float(i < 7) for i in range(12)}  # 7 of 12 sealed tasks, every seed
    one, ten = two_level_ci([run]), two_level_ci([run] * 10)
    assert ten.mean == pytest.approx(7 / 12)
    assert ten.hi - ten.lo > 0.35  # not [0.583, 0.583]
    assert ten.lo == pytest.approx(one.lo, abs=0.05) and ten.hi == pytest.approx(one.hi, abs=0.05)


def test_seed_to_seed_spread_widens_the_ci() -> None:
    tasks = [f"t{i}" for i in range(12)]
    same = [{t: 0.5 for t in tasks}] * 5
    spread = [{t: v for t in tasks} for v in (0.1, 0.3, 0.5, 0.7, 0.9)]
    assert two_level_ci(same).hi - two_level_ci(same).lo == 0  # no spread anywhere
    wide = two_level_ci(spread)
    assert wide.mean == pytest.approx(0.5) and wide.lo < 0.35 and wide.hi > 0.65


def test_difference_ci_paired_by_seed_and_over_shared_tasks() -> None:
    tasks = [f"t{i}" for i in range(12)]
    a = [{t: float(i < 9) for i, t in enumerate(tasks)}] * 8  # 9/12 in every seed
    b = [{t: float(i < 4) for i, t in enumerate(tasks)}] * 8  # 4/12
    d = difference_ci(a, b, paired=True)
    assert d.mean == pytest.approx(5 / 12)
    assert 0 < d.lo < 5 / 12 < d.hi <= 1  # the task draw is shared: d is over 5 tasks of 12
    assert difference_ci(a, a, paired=True).lo == 0 == difference_ci(a, a, paired=True).hi
    with pytest.raises(ValueError):
        difference_ci(a, b[:3], paired=True)


def test_bootstrap_is_deterministic() -> None:
    runs = [{"t1": 0.2, "t2": 0.9, "t3": 0.4}, {"t1": 0.5, "t2": 0.7, "t3": 0.1}]
    assert two_level_ci(runs) == two_level_ci(runs)
