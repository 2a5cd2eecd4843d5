"""``compare``'s statistics over runs: a method's scores with the two-level bootstrap CI,
and for each pair of methods the sealed difference with its CI, an exact permutation
test, Holm's correction across pairs, the verdict and a plan (runs per method needed).

The test: a sign flip over seeds when both methods ran the same seeds, a two-sample
permutation test over runs when their seeds differ, a sign flip over tasks (A's mean
reward minus B's, per task) when a method has one run. It holds the task set fixed; the
CI also resamples tasks. When the smallest p-value the data could give is above alpha, the
pair reads "cannot tell" instead of a number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rsiframe.study.inference import (
    POWER,
    PermutationTest,
    difference_ci,
    holm,
    runs_needed,
    sample_variance,
    sign_flip,
    sign_flip_floor,
    two_level_ci,
    two_sample,
    two_sample_floor,
)
from rsiframe.study.stats import ALPHA, Estimate

PAIR_SPLIT = "sealed"
#: fewer runs than this per method: a warning under the table
MIN_RUNS = 5

BY_SEED, UNPAIRED, BY_TASK, NO_DATA = "paired by seed", "runs, unpaired", "paired by task", "—"


class ScoredRun(Protocol):
    random_seed: int
    rewards: dict[str, dict[str, float]]  # the champion's, per split and task


@dataclass(frozen=True)
class Plan:
    """Runs per method to detect the observed difference (``runs`` None: the data cannot
    say), with the line that says it."""

    runs: int | None
    difference: float | None
    sd: float | None
    line: str


@dataclass
class Pair:
    a: str
    b: str
    design: str  # BY_SEED, UNPAIRED, BY_TASK or NO_DATA
    diff: Estimate | None  # A - B on sealed, two-level bootstrap CI
    test: PermutationTest | None
    plan: Plan
    runs: tuple[int, int] = (0, 0)  # A's and B's runs with a sealed score
    p_holm: float | None = None
    verdict: str = "no_data"  # no_data | cannot_tell | a_better | b_better | not_significant

    @property
    def equivalence(self) -> float | None:
        """Where no difference was found (``cannot_tell``, ``not_significant``): the
        largest |A - B| the 95 % CI of the difference still allows, so a null result says
        how large a difference these data rule out; None otherwise, and when the CI has no
        width (every resample tied: a handful of tied tasks, no evidence of equality)."""
        if self.diff is None or self.verdict not in ("cannot_tell", "not_significant"):
            return None
        if self.diff.hi - self.diff.lo <= 0:
            return None
        return max(abs(self.diff.lo), abs(self.diff.hi))

    def reads(self) -> str:
        """The verdict in words."""
        if self.test is None:
            return "no sealed scores on both sides"
        if self.verdict == "cannot_tell":
            return f"cannot tell with {self._units()}"
        if self.verdict == "not_significant":
            return "no significant difference"
        winner, loser = (self.a, self.b) if self.verdict == "a_better" else (self.b, self.a)
        caveat = ""
        if self.design != BY_TASK and self.diff is not None and self.diff.lo <= 0 <= self.diff.hi:
            caveat = " on these tasks (the CI over tasks includes 0)"
        return f"{winner} > {loser}{caveat}"

    def _units(self) -> str:
        t = self.test
        assert t is not None
        ties = f" ({t.differ} differ)" if t.differ < t.units else ""
        if self.design == BY_SEED:
            return f"{t.units} runs{ties}"
        if self.design == UNPAIRED:
            return f"{self.runs[0]} + {self.runs[1]} runs"
        return f"one run ({t.units} tasks, {t.differ} differ)"


# -- a method's scores ---------------------------------------------------------------------


def split_estimate(runs: Sequence[ScoredRun], split: str) -> Estimate | None:
    """Mean over runs of the champion's score on ``split``, two-level bootstrap CI; runs
    whose champion has no record on it (only unfinished ones) are not in it."""
    rows = [r.rewards[split] for r in runs if r.rewards.get(split)]
    return two_level_ci(rows) if rows else None


def task_count(runs: Sequence[ScoredRun], split: str) -> int:
    return len({t for r in runs for t in r.rewards.get(split, {})})


# -- pairs ---------------------------------------------------------------------------------


def _scored(runs: Sequence[ScoredRun]) -> list[ScoredRun]:
    return [r for r in runs if r.rewards.get(PAIR_SPLIT)]


def _rows(runs: list[ScoredRun]) -> list[dict[str, float]]:
    return [r.rewards[PAIR_SPLIT] for r in runs]


def _score(r: ScoredRun) -> float:
    v = r.rewards[PAIR_SPLIT]
    return math.fsum(v.values()) / len(v)


def _by_seed(a: list[ScoredRun], b: list[ScoredRun]) -> list[tuple[ScoredRun, ScoredRun]] | None:
    """The runs paired by seed when both methods ran exactly the same seeds, once each."""
    da, db = {r.random_seed: r for r in a}, {r.random_seed: r for r in b}
    if len(da) != len(a) or len(db) != len(b) or da.keys() != db.keys():
        return None
    return [(da[s], db[s]) for s in sorted(da)]


def _task_means(runs: list[ScoredRun]) -> dict[str, float]:
    tasks: dict[str, list[float]] = {}
    for r in runs:
        for t, v in r.rewards[PAIR_SPLIT].items():
            tasks.setdefault(t, []).append(v)
    return {t: math.fsum(v) / len(v) for t, v in tasks.items()}


def pair(
    a_name: str, a_runs: Sequence[ScoredRun], b_name: str, b_runs: Sequence[ScoredRun]
) -> Pair:
    """One pair's difference, test and plan (Holm and the verdict: :func:`judge`)."""
    a, b = _scored(a_runs), _scored(b_runs)
    if not a or not b:
        return Pair(a_name, b_name, NO_DATA, None, None, Plan(None, None, None, ""))
    if len(a) >= 2 and len(b) >= 2:
        paired = _by_seed(a, b)
        if paired is not None:
            pa, pb = [x for x, _ in paired], [y for _, y in paired]
            diffs = [_score(x) - _score(y) for x, y in paired]
            diff = difference_ci(_rows(pa), _rows(pb), paired=True)
            plan = _plan_paired(diffs)
            return Pair(a_name, b_name, BY_SEED, diff, sign_flip(diffs), plan, (len(a), len(b)))
        test = two_sample([_score(r) for r in a], [_score(r) for r in b])
        diff = difference_ci(_rows(a), _rows(b), paired=False)
        plan = _plan_unpaired(a, b)
        return Pair(a_name, b_name, UNPAIRED, diff, test, plan, (len(a), len(b)))
    ta, tb = _task_means(a), _task_means(b)
    common = sorted(ta.keys() & tb.keys())
    if not common:
        return Pair(a_name, b_name, NO_DATA, None, None, Plan(None, None, None, ""))
    test = sign_flip([ta[t] - tb[t] for t in common])
    diff = difference_ci(_rows(a), _rows(b), paired=False)
    one = a_name if len(a) == 1 else b_name
    line = f"{one} has one run: no per-seed variance to plan from; run each method twice or more"
    return Pair(a_name, b_name, BY_TASK, diff, test, Plan(None, None, None, line), (len(a), len(b)))


def judge(pairs: list[Pair], alpha: float = ALPHA) -> None:
    """Holm-adjust the pairs' p-values across the pairs tested, then set each verdict."""
    adjusted = holm([p.test.p if p.test is not None else None for p in pairs])
    for p, adj in zip(pairs, adjusted, strict=True):
        p.p_holm = adj
        if p.test is None or adj is None:
            p.verdict = "no_data"
        elif p.test.p_min > alpha:
            p.verdict = "cannot_tell"
        elif adj <= alpha:
            p.verdict = "a_better" if p.diff is not None and p.diff.mean > 0 else "b_better"
        else:
            p.verdict = "not_significant"


# -- what the numbers mean ---------------------------------------------------------------

CI_LINE = (
    "95 % CI: bootstrap over runs (seeds) and, within them, over tasks (one task draw for "
    "all runs, which ran the same tasks); a method with one run: over its tasks"
)


def pairs_line(pairs: list[Pair], alpha: float = ALPHA) -> str:
    tested = sum(p.test is not None for p in pairs)
    return (
        f"pairs: A - B on {PAIR_SPLIT}; p: two-sided permutation test, exact at small n (sign "
        "flips over seeds when both ran the same seeds, over tasks when a method has one "
        f"run), on these tasks; Holm-corrected across {tested} pair(s), alpha = {alpha}; "
        f"'cannot tell': no outcome of so few runs could reach p <= {alpha}; 'within "
        "+-X' (where no difference was found): X is the largest |A - B| inside the 95 % CI "
        "of the difference, so these data put any true difference on these tasks within "
        "+-X (a wide X says the data cannot rule much out; none when the CI has no width)"
    )


def few_runs_line(methods: Sequence[tuple[str, int]]) -> str:
    """The warning for methods with fewer than :data:`MIN_RUNS` runs ("" when none)."""
    few = [(name, n) for name, n in methods if n < MIN_RUNS]
    if not few:
        return ""
    shown = ", ".join(f"{name} ({n})" for name, n in few[:6])
    shown += f" and {len(few) - 6} more" if len(few) > 6 else ""
    floor = sign_flip_floor()
    return (
        f"warning: fewer than {MIN_RUNS} runs: {shown}; with so few seeds a difference can "
        f"rarely be told (an exact paired test needs {floor} runs to reach p <= {ALPHA}); "
        "--plan estimates how many it would take"
    )


# -- planning ------------------------------------------------------------------------------


def _plan(delta: float, variance: float, n: int, floor: int, same: str) -> Plan:
    """``same``: how the data look when their variance is 0 (said in that case)."""
    sd = math.sqrt(variance)
    if abs(delta) < 1e-12:
        return Plan(
            None,
            0.0,
            sd,
            f"observed difference 0 with {n} runs per method: nothing to detect, so these "
            "data cannot say how many runs would find a difference",
        )
    if variance < 1e-18:
        return Plan(
            None,
            delta,
            0.0,
            f"{same} (variance 0): these data cannot say how many runs it takes; an exact "
            f"test needs at least {floor} per method",
        )
    need = runs_needed(delta, variance)
    runs = max(need, floor)
    note = f"; the exact test needs at least {floor}" if floor > need else ""
    return Plan(
        runs,
        delta,
        sd,
        f"about {runs} runs per method to detect {delta:+.3f} (SD of a one-seed difference "
        f"{sd:.3f}) at {POWER * 100:.0f} % power, alpha = {ALPHA} (normal approximation"
        f"{note}); you have {n}",
    )


def _plan_paired(diffs: list[float]) -> Plan:
    delta = math.fsum(diffs) / len(diffs)
    same = f"all {len(diffs)} paired seeds differ by the same {delta:+.3f}"
    return _plan(delta, sample_variance(diffs), len(diffs), sign_flip_floor(), same)


def _plan_unpaired(a: list[ScoredRun], b: list[ScoredRun]) -> Plan:
    sa, sb = [_score(r) for r in a], [_score(r) for r in b]
    delta = math.fsum(sa) / len(sa) - math.fsum(sb) / len(sb)
    variance = sample_variance(sa) + sample_variance(sb)
    same = f"each method scored the same in every run (difference {delta:+.3f})"
    return _plan(delta, variance, min(len(sa), len(sb)), two_sample_floor(), same)
