"""The statistics behind ``compare``'s verdicts: one CI meaning, tests exact at small n.

- :func:`two_level_ci` and :func:`difference_ci`: a percentile bootstrap that resamples
  runs (seeds) and, within them, tasks. The runs of a comparison ran the same tasks, so one
  task draw is shared by every run of a replicate: more seeds never hide how few tasks
  there are. A method with one run is the special case (a bootstrap over its tasks).
- :func:`sign_flip`: the paired permutation test, exact (every one of the 2^n sign flips)
  up to :data:`EXACT_UP_TO` pairs that differ; :func:`two_sample`: the unpaired one.
  Both give the smallest p-value their data could give, so a caller can say when the
  data cannot decide at all.
- :func:`holm` adjusts p-values across pairs; :func:`runs_needed` is the normal
  approximation of the runs per method for a given power.

Deterministic (seeded :class:`random.Random`), standard library only, on plain values.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from rsiframe.study.stats import ALPHA, RESAMPLES, Estimate, quantile

#: exact enumeration up to this many differing pairs (2^16 = 65,536 sign vectors)
EXACT_UP_TO = 16
#: exact two-sample enumeration up to this many label assignments
EXACT_ASSIGNMENTS = 50_000
#: random sign flips or relabellings beyond the exact limits
PERMUTATIONS = 20_000
POWER = 0.8

Rewards = Mapping[str, float]  # one run's rewards on a split, by task


@dataclass(frozen=True)
class PermutationTest:
    """A two-sided permutation test of "no difference".

    ``p_min``: the smallest p-value any outcome with these magnitudes (and ties) could
    give; when it is above alpha the data cannot decide, whatever they say.
    """

    p: float
    p_min: float
    exact: bool
    units: int  # pairs (sign flip) or values in all (two-sample)
    differ: int  # pairs whose difference is not 0 (two-sample: units)


# -- the two-level bootstrap ---------------------------------------------------------------


def _matrix(runs: Sequence[Rewards], tasks: list[str]) -> list[list[float | None]]:
    return [[r.get(t) for t in tasks] for r in runs]


def _row_mean(row: list[float | None], draw: list[int] | None = None) -> float:
    """A run's mean over the drawn tasks it has (all of them when ``draw`` is None); runs
    of one comparison share their tasks, so "it has" matters only under ``--force``."""
    picked = [row[j] for j in (draw if draw is not None else range(len(row)))]
    vals = [v for v in picked if v is not None]
    if not vals:  # none of the drawn tasks: its own mean stands in
        return _row_mean(row) if draw is not None else 0.0
    return math.fsum(vals) / len(vals)


def _tasks(*groups: Sequence[Rewards]) -> list[str]:
    tasks = sorted({t for runs in groups for r in runs for t in r})
    if not tasks:
        raise ValueError("a bootstrap over tasks needs at least one task")
    return tasks


def _mean_of(rows: list[list[float | None]], picks: list[int], draw: list[int]) -> float:
    cache: dict[int, float] = {}
    total = 0.0
    for i in picks:
        if i not in cache:
            cache[i] = _row_mean(rows[i], draw)
        total += cache[i]
    return total / len(picks)


def _percentile(point: float, reps: list[float], n: int, alpha: float) -> Estimate:
    reps.sort()
    return Estimate(point, quantile(reps, alpha / 2), quantile(reps, 1 - alpha / 2), n)


def two_level_ci(
    runs: Sequence[Rewards], *, resamples: int = RESAMPLES, alpha: float = ALPHA, seed: int = 0
) -> Estimate:
    """The mean over runs of each run's mean reward, with a bootstrap CI over runs and
    tasks (``n``: the runs)."""
    if not runs:
        raise ValueError("a CI needs at least one run")
    tasks = _tasks(runs)
    rows = _matrix(runs, tasks)
    point = math.fsum(_row_mean(r) for r in rows) / len(rows)
    rng = random.Random(seed)
    n, k = len(rows), len(tasks)
    reps = []
    for _ in range(resamples):
        draw = rng.choices(range(k), k=k)
        reps.append(_mean_of(rows, rng.choices(range(n), k=n), draw))
    return _percentile(point, reps, n, alpha)


def difference_ci(
    a: Sequence[Rewards],
    b: Sequence[Rewards],
    *,
    paired: bool,
    resamples: int = RESAMPLES,
    alpha: float = ALPHA,
    seed: int = 0,
) -> Estimate:
    """Mean of A minus mean of B with the same two-level bootstrap; ``paired``: ``a[i]``
    and ``b[i]`` ran the same seed and are drawn together. One task draw serves both."""
    if not a or not b:
        raise ValueError("a difference needs runs on both sides")
    if paired and len(a) != len(b):
        raise ValueError("paired runs must come in pairs")
    tasks = _tasks(a, b)
    ra, rb = _matrix(a, tasks), _matrix(b, tasks)
    point = math.fsum(_row_mean(r) for r in ra) / len(ra)
    point -= math.fsum(_row_mean(r) for r in rb) / len(rb)
    rng = random.Random(seed)
    k = len(tasks)
    reps = []
    for _ in range(resamples):
        draw = rng.choices(range(k), k=k)
        pa = rng.choices(range(len(ra)), k=len(ra))
        pb = pa if paired else rng.choices(range(len(rb)), k=len(rb))
        reps.append(_mean_of(ra, pa, draw) - _mean_of(rb, pb, draw))
    return _percentile(point, reps, min(len(a), len(b)), alpha)


# -- permutation tests ---------------------------------------------------------------------


def _tol(values: Sequence[float]) -> float:
    """Sums built in another order may differ in the last bits: count those as ties."""
    return 1e-9 * max(1.0, math.fsum(abs(v) for v in values))


def sign_flip(
    diffs: Sequence[float], *, permutations: int = PERMUTATIONS, seed: int = 0
) -> PermutationTest:
    """Two-sided paired permutation test on ``diffs`` (A - B per pair): the share of sign
    vectors whose |sum| is at least the observed |sum|. Pairs that tie cannot change the
    sum, so they are left out of the enumeration (the p-value is the same)."""
    if not diffs:
        raise ValueError("a sign-flip test needs at least one pair")
    tol = _tol(diffs)
    nz = [float(d) for d in diffs if abs(d) > tol]
    if not nz:
        return PermutationTest(1.0, 1.0, True, len(diffs), 0)
    observed = abs(math.fsum(nz))
    p_min = min(1.0, 2.0 / 2 ** len(nz))  # all in one direction: only it and its mirror
    if len(nz) <= EXACT_UP_TO:
        sums = [0.0]
        for d in nz:
            sums = [s + d for s in sums] + [s - d for s in sums]
        hits = sum(1 for s in sums if abs(s) >= observed - tol)
        return PermutationTest(hits / len(sums), p_min, True, len(diffs), len(nz))
    rng = random.Random(seed)
    hits = 0
    for _ in range(permutations):
        s = math.fsum(d if rng.random() < 0.5 else -d for d in nz)
        hits += abs(s) >= observed - tol
    return PermutationTest((1 + hits) / (1 + permutations), p_min, False, len(diffs), len(nz))


def _extreme_count(pooled: list[float], k: int, largest: bool) -> tuple[float, int]:
    """The sum of the ``k`` largest (or smallest) values and in how many ways k values
    reach it (choices among ties at the boundary)."""
    ordered = sorted(pooled, reverse=largest)
    chosen = ordered[:k]
    edge = chosen[-1]
    return math.fsum(chosen), math.comb(pooled.count(edge), chosen.count(edge))


def _two_sample_p_min(pooled: list[float], na: int, diff_of: Callable[[float], float]) -> float:
    total = math.comb(len(pooled), na)
    hi_sum, hi_ways = _extreme_count(pooled, na, largest=True)
    lo_sum, lo_ways = _extreme_count(pooled, na, largest=False)
    d_hi, d_lo = abs(diff_of(hi_sum)), abs(diff_of(lo_sum))
    tol = _tol(pooled)
    top = max(d_hi, d_lo)
    ways = hi_ways * (d_hi >= top - tol) + lo_ways * (d_lo >= top - tol)
    return min(1.0, ways / total)


def two_sample(
    a: Sequence[float], b: Sequence[float], *, permutations: int = PERMUTATIONS, seed: int = 0
) -> PermutationTest:
    """Two-sided permutation test of mean(A) = mean(B) for unpaired values: every way to
    label ``len(a)`` of the pooled values as A (exact up to :data:`EXACT_ASSIGNMENTS`)."""
    if not a or not b:
        raise ValueError("a two-sample test needs values on both sides")
    pooled = [float(v) for v in (*a, *b)]
    na, nb, total_sum = len(a), len(b), math.fsum(pooled)

    def diff_of(sum_a: float) -> float:
        return sum_a / na - (total_sum - sum_a) / nb

    units = len(pooled)
    if max(pooled) == min(pooled):
        return PermutationTest(1.0, 1.0, True, units, units)
    tol = _tol(pooled)
    observed = abs(diff_of(math.fsum(a)))
    p_min = _two_sample_p_min(pooled, na, diff_of)
    if math.comb(units, na) <= EXACT_ASSIGNMENTS:
        stats = [diff_of(math.fsum(c)) for c in itertools.combinations(pooled, na)]
        hits = sum(1 for s in stats if abs(s) >= observed - tol)
        return PermutationTest(hits / len(stats), p_min, True, units, units)
    rng = random.Random(seed)
    hits = sum(
        abs(diff_of(math.fsum(rng.sample(pooled, na)))) >= observed - tol
        for _ in range(permutations)
    )
    return PermutationTest((1 + hits) / (1 + permutations), p_min, False, units, units)


# -- across pairs, and planning ------------------------------------------------------------


def holm(ps: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of the p-values that are not None (order kept)."""
    given = sorted((p, i) for i, p in enumerate(ps) if p is not None)
    m = len(given)
    out: list[float | None] = [None] * len(ps)
    running = 0.0
    for rank, (p, i) in enumerate(given):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def runs_needed(
    delta: float, variance: float, *, alpha: float = ALPHA, power: float = POWER
) -> int:
    """Runs per method for a two-sided z-test at ``alpha`` to detect ``delta`` with
    ``power``: ceil(((z_{1-alpha/2} + z_power) / delta)^2 * variance), where ``variance`` is
    the per-seed variance of the paired differences (or the sum of both methods' per-run
    variances, unpaired)."""
    if delta == 0 or variance <= 0:
        raise ValueError("a plan needs a difference and a variance that are not 0")
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return max(1, math.ceil(round(z * z * variance / (delta * delta), 9)))


def sign_flip_floor(alpha: float = ALPHA) -> int:
    """Fewest pairs with which an exact two-sided sign-flip test can reach ``alpha``."""
    n = 1
    while 2.0 / 2**n > alpha:
        n += 1
    return n


def two_sample_floor(alpha: float = ALPHA) -> int:
    """Fewest runs per method with which an exact two-sample test can reach ``alpha``."""
    n = 1
    while 2.0 / math.comb(2 * n, n) > alpha:
        n += 1
    return n


def sample_variance(values: Sequence[float]) -> float:
    if len(values) < 2:
        raise ValueError("a variance needs two values")
    m = math.fsum(values) / len(values)
    return math.fsum((v - m) ** 2 for v in values) / (len(values) - 1)
