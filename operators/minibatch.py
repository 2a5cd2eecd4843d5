"""validate `minibatch`: a child must beat its parent on a train minibatch first (GEPA).

GEPA (Agrawal et al. 2025, gepa-ai/gepa, ``reflection_minibatch_size``,
``StrictImprovementAcceptance``) evaluates a proposed candidate on the minibatch its
reflection saw and keeps it only if its sum there beats the sum of the parent's fresh run
on the same examples. The framework runs the child's work tree (sandboxed, uncertified).

- ``tasks: rollout`` (GEPA): the minibatch is exactly the rollout's tasks (the ones the
  mutation was made from), and the parent's rewards are the rollout's (fresh when the
  rollout runs the parent again: ``rollout: {config: {reuse_certified: false}}``).
- ``tasks: random`` (the default; an rsiframe screen, not GEPA's acceptance): ``size``
  train tasks drawn by the call's seeded RNG, against the parent's certified rewards.
- ``merge_tasks: N`` (GEPA's merge acceptance): a merge child is run on up to N train
  tasks chosen where its two parents' certified rewards differ (one side better, the other
  better, then ties: GEPA's ``select_eval_subsample_for_merged_program``) and kept when its
  sum there reaches the larger of its parents' sums.

Strict improvement by default; ``ties: true`` accepts a child that only ties.
"""

from __future__ import annotations

import math
import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import Check, RunStart, ValidateContext, ValidateOperator


class MinibatchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = Field(3, ge=1, description="train tasks in the minibatch (at most)")
    ties: bool = Field(False, description="accept a child that only ties its parent")
    tasks: Literal["random", "rollout"] = Field(
        "random",
        description="random: size tasks drawn, against certified rewards; rollout: the "
        "rollout's tasks, against the parent's rewards there (GEPA)",
    )
    merge_tasks: int | None = Field(
        None,
        ge=1,
        description="a merge child: accepted on up to this many tasks where its parents "
        "differ if it reaches the larger parent sum (GEPA: 5); unset: as a mutation",
    )


def merge_subsample(
    first: dict[str, float], second: dict[str, float], k: int, rng: random.Random
) -> list[str]:
    """Up to ``k`` task ids both parents were scored on: a share where the first is better,
    one where the second is, then ties, then any left (GEPA's merge subsample, without
    repeating a task)."""
    common = sorted(set(first) & set(second))
    buckets = (
        [t for t in common if first[t] > second[t]],
        [t for t in common if second[t] > first[t]],
        [t for t in common if first[t] == second[t]],
    )
    each = max(1, math.ceil(k / 3))
    picked: list[str] = []
    for bucket in buckets:
        take = min(len(bucket), each, k - len(picked))
        if take > 0:
            picked += rng.sample(bucket, take)
    unused = [t for t in common if t not in picked]
    picked += rng.sample(unused, min(len(unused), k - len(picked)))
    return sorted(picked)


class Minibatch(ValidateOperator):
    """Accept a child only if it beats its parent on a train minibatch (GEPA's acceptance)."""

    name = "minibatch"
    Config = MinibatchConfig
    config: MinibatchConfig

    def max_task_runs(self, train: int) -> int:
        cfg: MinibatchConfig = self.config
        return min(max(cfg.size, cfg.merge_tasks or 0), train)

    def draws(self, start: RunStart) -> bool:
        return self.config.size < start.splits.get("train", 0)

    def start_warnings(self, start: RunStart) -> list[str]:
        size, train = self.config.size, start.splits.get("train", 0)
        if size < train:
            return []
        return [
            f"the minibatch of {size} is not smaller than the train split ({train} tasks): "
            "every child is screened on the whole split, not on a sample of it"
        ]

    def validate(self, ctx: ValidateContext) -> Check:
        cfg: MinibatchConfig = self.config
        if ctx.run_train is None:
            raise ValueError("minibatch needs the framework's run_train (not offered here)")
        if ctx.merged_with is not None and cfg.merge_tasks is not None:
            return self._merge(ctx, cfg.merge_tasks)
        if cfg.tasks == "rollout" and ctx.rollout is not None:
            ids, base = self._rollout_batch(ctx)
        else:
            ids, base = self._random_batch(ctx)
        rows = ctx.run_train(ids)
        child = sum(r["reward"] or 0.0 for r in rows)
        ok = child > base or (cfg.ties and child == base)
        verb = "beats" if child > base else ("ties" if child == base else "loses to")
        return Check(ok=ok, reason=f"minibatch {ids}: child {child:g} {verb} parent {base:g}")

    def _rollout_batch(self, ctx: ValidateContext) -> tuple[list[str], float]:
        """The rollout's tasks and the parent's sum there (GEPA: the reflection's batch)."""
        assert ctx.rollout is not None
        rows = {str(r["task"]): float(r.get("reward") or 0.0) for r in ctx.rollout.trajectories}
        if len(rows) > self.config.size:
            raise ValueError(
                f"the rollout ran {len(rows)} tasks, more than the minibatch's size "
                f"{self.config.size} (set both to GEPA's minibatch)"
            )
        ids = sorted(rows)
        return ids, sum(rows.values())

    def _random_batch(self, ctx: ValidateContext) -> tuple[list[str], float]:
        parent = ctx.run.rewards(ctx.parent.id, "train")
        if parent is None:
            raise ValueError(f"{ctx.parent.id} has no certified train rewards")
        pool = sorted(t for t in ctx.train_tasks if t in parent)
        ids = sorted(ctx.rng.sample(pool, min(self.config.size, len(pool))))
        return ids, sum(parent[t] for t in ids)

    def _merge(self, ctx: ValidateContext, k: int) -> Check:
        """GEPA's merge acceptance: at least the better parent's sum where they differ."""
        assert ctx.merged_with is not None and ctx.run_train is not None
        a, b = ctx.parent.id, ctx.merged_with.id
        ra, rb = ctx.run.rewards(a, "train"), ctx.run.rewards(b, "train")
        if ra is None or rb is None:
            raise ValueError(f"{a} or {b} has no certified train rewards")
        ids = merge_subsample(ra, rb, k, ctx.rng)
        child = sum(r["reward"] or 0.0 for r in ctx.run_train(ids))
        sums = (sum(ra[t] for t in ids), sum(rb[t] for t in ids))
        ok = child >= max(sums)
        verb = "reaches" if ok else "is below"
        return Check(
            ok=ok,
            reason=f"merge minibatch {ids}: child {child:g} {verb} max of parents "
            f"{a} {sums[0]:g}, {b} {sums[1]:g}",
        )
