"""An evaluation of the same model and harness is bit-for-bit repeatable on one host, also
when it is a resumed run's second attempt (issue 12 item 6).

The reported case: two runs of one seed agreed on train and gate but not on one sealed
task, and the second run's sealed split ran as attempt 2 after a SIGKILL. Here the tiny
D/T/H seed samples (temperature 0.7, so every completion depends on the sampling seed),
and its sealed split runs once straight (attempt 1) and once after a SIGKILL in the middle
of it (attempt 2, a fresh model server): the rewards and every completion are equal.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from rsiframe.archive.log import get_artifact
from tests.support.cli import cli_proc, events
from tests.support.dth import recipe, write_seed, write_tasks

pytestmark = pytest.mark.e2e


def sealed(run_dir: Path) -> tuple[int, dict[str, float], dict[str, bytes]]:
    """The sealed attempt certified, its rewards, and each task's answers as written."""
    evs = events(run_dir)
    cert = [e["data"] for e in evs if e["type"] == "evaluation_certified"]
    attempt = next(c["attempt"] for c in cert if c["split"] == "sealed")
    done = [
        e["data"]
        for e in evs
        if e["type"] == "task_finished"
        and e["data"]["split"] == "sealed"
        and e["data"]["attempt"] == attempt
    ]
    rewards = {d["task"]: d["reward"] for d in done}
    answers = {}
    for d in done:
        traj = json.loads(get_artifact(run_dir, d["trajectory"]))
        answers[d["task"]] = get_artifact(run_dir, traj["artifacts"]["app/answers.jsonl"])
    return attempt, rewards, answers


def test_a_sealed_split_run_as_attempt_2_after_sigkill_gives_the_same_completions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSIFRAME_CACHE_DIR", str(tmp_path / "cache"))
    write_seed(tmp_path / "seed", harness={"temperature": 0.7})
    write_tasks(tmp_path / "tasks", n_tasks=3, per_task=8)
    text = yaml.safe_load(recipe())
    text["budget"] = {"max_generations": 0}  # the seed only: train, gate, then sealed
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(text))
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    res = cli_proc("run", tmp_path / "recipe.yaml", "--out", straight, "--quiet", timeout=900)
    assert res.returncode == 0, res.stderr
    res = cli_proc(
        "run",
        tmp_path / "recipe.yaml",
        "--out",
        killed,
        "--quiet",
        env={"RSIFRAME_FAULT": "kill:after:evaluation_started:3"},  # the sealed one
        timeout=900,
    )
    assert res.returncode == -signal.SIGKILL, res.stderr
    res = cli_proc("resume", killed, "--quiet", timeout=900)
    assert res.returncode == 0, res.stderr
    a_attempt, a_rewards, a_answers = sealed(straight)
    b_attempt, b_rewards, b_answers = sealed(killed)
    assert (a_attempt, b_attempt) == (1, 2)
    assert a_rewards == b_rewards
    assert a_answers == b_answers  # every sampled completion, byte for byte
    # the model answered (sampled text, compared above byte for byte)
    said = [json.loads(line)["answer"] for a in a_answers.values() for line in a.splitlines()]
    assert any(said), said
