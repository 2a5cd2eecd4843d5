"""validate `minibatch`: a child must beat its parent on a random train minibatch first.

GEPA (Agrawal et al. 2025, gepa-ai/gepa, ``reflection_minibatch_size``) evaluates a
proposed candidate on the minibatch its reflection saw and keeps it for full evaluation
only if its score there beats the parent's. Here the framework runs the child's work
tree (sandboxed, uncertified) on ``size`` train tasks drawn by the call's seeded RNG;
the parent's rewards on the same tasks are its certified train rewards.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import Check, RunStart, ValidateContext, ValidateOperator


class MinibatchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = Field(3, ge=1, description="train tasks in the minibatch")
    ties: bool = Field(False, description="accept a child that only ties its parent")


class Minibatch(ValidateOperator):
    """Accept a child only if it beats its parent's certified rewards on a train minibatch."""

    name = "minibatch"
    Config = MinibatchConfig
    config: MinibatchConfig

    def max_task_runs(self, train: int) -> int:
        cfg: MinibatchConfig = self.config
        return min(cfg.size, train)

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
        parent = ctx.run.rewards(ctx.parent.id, "train")
        if parent is None:
            raise ValueError(f"{ctx.parent.id} has no certified train rewards")
        pool = sorted(t for t in ctx.train_tasks if t in parent)
        ids = sorted(ctx.rng.sample(pool, min(cfg.size, len(pool))))
        rows = ctx.run_train(ids)
        child = sum(r["reward"] or 0.0 for r in rows)
        base = sum(parent[t] for t in ids)
        ok = child > base or (cfg.ties and child == base)
        verb = "beats" if child > base else ("ties" if child == base else "loses to")
        return Check(
            ok=ok,
            reason=f"minibatch {ids}: child {child:g} {verb} parent {base:g}",
        )
