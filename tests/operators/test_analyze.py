"""The failures analyze operator."""

from __future__ import annotations

import random

from rsiframe.api import (
    Analysis,
    AnalyzeContext,
    Rollout,
)
from rsiframe.operators.analyze import Failures, FailuresConfig
from rsiframe.operators.rollout import LocalRollout, LocalRolloutConfig
from tests.support.runview import TRAJ, FakeRun, cand, rctx

# -- rollout and analyze -------------------------------------------------------------------


def test_failures_analysis() -> None:
    rows = (
        LocalRollout(LocalRolloutConfig())
        .rollout(rctx(FakeRun([cand("p")], {}, trajectories={"p": TRAJ}), []))
        .trajectories
    )
    a = Failures(FailuresConfig(max_examples=2)).analyze(
        AnalyzeContext(
            FakeRun([cand("p")], {}), random.Random(0), 1, cand("p"), Rollout(trajectories=rows)
        )
    )
    assert isinstance(a, Analysis)
    assert a.summary.startswith("3/4 train tasks not solved")
    assert "gave up after 300 decisions (x2)" in a.summary
    assert a.details["failed"] == ["b", "c", "d"]
    assert a.details["pass_rate"] == 0.25
    assert len(a.details["examples"]) == 2
