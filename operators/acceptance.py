"""Statistical acceptance: admit a child only when it beats its parent beyond noise.

A gate gain of one item in a few hundred is noise, and admitting on it is where gate
overfitting starts. ``paired_test`` pairs the child's and the parent's per-task gate
rewards and admits only when a one-sided sign test (or a paired bootstrap) says the
child is better at level ``alpha`` *and* the mean gain exceeds ``min_delta``. It reads
per-task gate rewards through the gate-only grant ``rewards:gate`` declared below
(``rsiframe operators describe paired_test`` shows it); sealed results stay unreadable.
"""

from __future__ import annotations

import math
import random
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import GateContext, GateDecision, GateOperator, RunStart


def sign_test_p(diffs: list[float]) -> float:
    """One-sided sign test: P(at least this many wins | wins and losses equally likely)."""
    wins = sum(1 for d in diffs if d > 0)
    n = wins + sum(1 for d in diffs if d < 0)
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n


def paired_bootstrap_p(diffs: list[float], rng: random.Random, resamples: int) -> float:
    """Share of task resamples whose mean gain is not above zero (one-sided)."""
    if not diffs:
        return 1.0
    n = len(diffs)
    worse = 0
    for _ in range(resamples):
        if sum(diffs[rng.randrange(n)] for _ in range(n)) <= 0:
            worse += 1
    return worse / resamples


class PairedTestConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    test: Literal["sign", "bootstrap"] = Field("sign", description="sign test or paired bootstrap")
    alpha: float = Field(0.1, gt=0, lt=1, description="admit when the p-value is below this")
    min_delta: float = Field(0.0, ge=0, description="the mean gain must also exceed this")
    resamples: int = Field(2000, ge=100, le=100_000, description="bootstrap resamples")


class PairedTest(GateOperator):
    """Admit a child only if it beats its parent per task at level alpha (sign test or bootstrap).

    Reads per-task gate rewards through the declared gate-only grant ``rewards:gate``.
    Sources: the paired comparisons of the RSIHub paper's execution-fidelity check;
    GEPA's minibatch acceptance criterion applied to the full gate split.
    """

    name = "paired_test"
    Config = PairedTestConfig
    config: PairedTestConfig
    grants: ClassVar[frozenset[str]] = frozenset({"rewards:gate"})

    def draws(self, start: RunStart) -> bool:
        return self.config.test == "bootstrap"

    def gate(self, ctx: GateContext) -> GateDecision:
        child = ctx.run.rewards(ctx.candidate.id, "gate")
        parent = ctx.run.rewards(ctx.parent.id, "gate")
        if not child or not parent:
            raise ValueError("paired_test needs per-task gate rewards of child and parent")
        tasks = sorted(set(child) & set(parent))
        diffs = [child[t] - parent[t] for t in tasks]
        mean = sum(diffs) / len(diffs) if diffs else 0.0
        cfg = self.config
        if cfg.test == "sign":
            p = sign_test_p(diffs)
        else:
            p = paired_bootstrap_p(diffs, ctx.rng, cfg.resamples)
        wins = sum(1 for d in diffs if d > 0)
        losses = sum(1 for d in diffs if d < 0)
        admit = p < cfg.alpha and mean > cfg.min_delta
        verdict = "beats" if admit else "does not beat"
        return GateDecision(
            admit=admit,
            reason=f"{verdict} parent: {wins} wins, {losses} losses over {len(tasks)} tasks, "
            f"mean {mean:+.3f}, {cfg.test} p={p:.3f} (alpha {cfg.alpha:g})",
        )
