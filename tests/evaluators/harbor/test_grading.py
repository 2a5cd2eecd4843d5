"""The Harbor engine reads its bwrap environment's grading record into the trajectory
(`app_removed`, as the local engine names it)."""

from __future__ import annotations

import json
from pathlib import Path

from rsiframe.evaluators.harbor.engine import HarborEngine
from rsiframe.recipe.evaluator import HarborEngineConfig
from tests.support.harbor import secret_task


def test_the_grading_record_becomes_the_trajectorys_app_removed(tmp_path: Path) -> None:
    """The engine reads the environment's record into the local engine's key."""
    trial = tmp_path / "job" / "secret__abc"
    (trial / "agent").mkdir(parents=True)
    task = secret_task(tmp_path).tasks["secret"]
    (trial / "result.json").write_text(
        json.dumps({"task_id": {"path": str(task.path)}, "verifier_result": {"rewards": {}}})
    )
    removed = [{"path": "answer.txt", "reason": "symlink leaves /app (-> /tests/x)"}]
    (trial / "rsiframe-grading.json").write_text(json.dumps({"app_removed": removed}))
    eng = HarborEngine(HarborEngineConfig(agent="true"), tmp_path / "w")
    run, _ = eng._trial_run(trial, {str(task.path.resolve()): task})
    assert run.trajectory["app_removed"] == removed
