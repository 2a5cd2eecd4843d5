"""The local rollout operator: certified trajectories reused, a sample run when asked."""

from __future__ import annotations

from rsiframe.operators.rollout import LocalRollout, LocalRolloutConfig
from tests.support.runview import TRAJ, FakeRun, cand, rctx

# -- rollout and analyze -------------------------------------------------------------------


def test_rollout_reuses_certified_trajectories() -> None:
    calls: list[list[str] | None] = []
    out = LocalRollout(LocalRolloutConfig()).rollout(
        rctx(FakeRun([cand("p")], {}, trajectories={"p": TRAJ}), calls)
    )
    assert out.reused and calls == []
    assert [t["task"] for t in out.trajectories] == ["a", "b", "c", "d"]
    assert out.trajectories[1]["stdout_tail"].endswith("300 decisions")


def test_rollout_runs_a_sample_when_asked() -> None:
    calls: list[list[str] | None] = []
    out = LocalRollout(LocalRolloutConfig(reuse_certified=False, max_tasks=2)).rollout(
        rctx(FakeRun([cand("p")], {}, trajectories={"p": TRAJ}), calls)
    )
    assert not out.reused and len(calls) == 1 and len(calls[0] or []) == 2
    assert {t["task"] for t in out.trajectories} == set(calls[0] or [])
