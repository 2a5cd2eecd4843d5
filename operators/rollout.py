"""rollout: run the parent on train tasks and keep the trajectories for analyze and mutate."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import Rollout, RolloutContext, RolloutOperator, RunStart


def summary(traj: dict[str, Any], instruction: str = "") -> dict[str, Any]:
    """The common shape of a trajectory summary handed to operators (with the task's
    instruction: what the agent was told)."""
    agent = traj.get("agent", {})
    verifier = traj.get("verifier", {})
    return {
        "task": traj["task"],
        "instruction": instruction,
        "reward": traj.get("reward", 0.0),
        "error": traj.get("error"),
        "trajectory": traj.get("trajectory", ""),
        "stdout_tail": traj.get("stdout_tail", agent.get("stdout_tail", "")),
        "stderr_tail": traj.get("stderr_tail", agent.get("stderr_tail", "")),
        # what the verifier said (its want/got), train split only like the rest
        "verifier_tail": traj.get(
            "verifier_tail",
            (verifier.get("stdout_tail", "") + "\n" + verifier.get("stderr_tail", "")).strip(),
        ),
        # what the agent changed under /app (None: not known), e.g. DGM's empty patches
        "app_changed": traj.get("app_changed", (traj.get("app") or {}).get("changed")),
    }


class LocalRolloutConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_tasks: int | None = Field(
        None, ge=1, description="train tasks to run (sampled); all if unset"
    )
    reuse_certified: bool = Field(
        True, description="reuse the parent's certified train trajectories instead of rerunning"
    )


class LocalRollout(RolloutOperator):
    """Runs the parent on (a sample of) the train split in the local sandbox."""

    name = "local"
    Config = LocalRolloutConfig
    config: LocalRolloutConfig

    def max_task_runs(self, train: int) -> int:
        # an admitted parent always has certified train trajectories to reuse (of the train
        # split, or of the train stage a staged evaluation archived it at)
        cfg: LocalRolloutConfig = self.config
        return 0 if cfg.reuse_certified else min(cfg.max_tasks or train, train)

    def draws(self, start: RunStart) -> bool:
        limit = self.config.max_tasks
        return limit is not None and limit < start.splits.get("train", 0)

    def rollout(self, ctx: RolloutContext) -> Rollout:
        limit = self.config.max_tasks
        if self.config.reuse_certified:
            certified = ctx.run.trajectories(ctx.parent.id)
            stop = ctx.parent.stopped_at
            if not certified and stop is not None and stop.startswith("train@"):
                certified = ctx.run.trajectories(ctx.parent.id, stop)
            if certified:
                rows = [summary(t, ctx.instructions.get(t["task"], "")) for t in certified]
                if limit is not None and limit < len(rows):
                    rows = sorted(ctx.rng.sample(rows, limit), key=lambda r: r["task"])
                return Rollout(trajectories=rows, reused=True)
        ids = list(ctx.train_tasks)
        if limit is not None and limit < len(ids):
            ids = sorted(ctx.rng.sample(ids, limit))
        rows = [summary(t, ctx.instructions.get(t["task"], "")) for t in ctx.run_train(ids)]
        return Rollout(trajectories=rows, reused=False)
