"""rsiframe.engine.evaluation: a staged evaluation's fixed subsets, and one attempt run on
an evaluator and an executor that run nothing: its results, its evidence, and how it fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.archive import events as E
from rsiframe.dth.build import BuildRejected
from rsiframe.engine.certify import FinishedEvaluation
from rsiframe.engine.evaluation import Job, Stages, TaskRunner, evaluate
from rsiframe.errors import ClusterLost
from rsiframe.recipe.schema import StageSpec
from tests.support.cli import cli, events, status_json
from tests.support.mini import make_mini
from tests.support.runlog import SignedRun

# -- staged evaluation ------------------------------------------------------------------


def test_stage_subsets_are_fixed_for_every_child_and_default_splits_follow() -> None:
    split = {"train": [f"t{i}" for i in range(10)], "gate": ["g1", "g2"]}
    specs = [StageSpec(split="train", tasks=3, min_score=0.5), StageSpec(split="train")]
    a, b = Stages(specs, split, 7), Stages(specs, split, 7)
    assert a.splits == ["train@1", "train", "gate"]
    assert a.task_ids("train@1") == b.task_ids("train@1")
    assert len(a.task_ids("train@1")) == 3 and set(a.task_ids("train@1")) <= set(split["train"])
    assert a.task_ids("train") == split["train"] and a.task_ids("gate") == ["g1", "g2"]
    assert Stages([], split).splits == []  # no stages: the default train, gate
    # a stage asking for at least the whole split is the split itself
    assert Stages([StageSpec(split="train", tasks=99)], split).splits == ["train", "gate"]


# -- one attempt, on an evaluator and an executor that run nothing (tests/support/fakes.py)


def _job(signed_run: SignedRun, task_ids: list[str]) -> Job:
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    c = signed_run.state.candidates["c0001"]
    attempt = signed_run.start_evaluation("c0001", "train", len(task_ids))
    assert c.commit and c.tree
    return Job("c0001", c.commit, c.tree, c.parent_commit, "train", attempt, task_ids, "d")


def test_an_attempt_returns_the_rewards_and_reports_each_task_as_it_ends(
    signed_run: SignedRun, task_runner: TaskRunner
) -> None:
    job = _job(signed_run, ["t1", "t4"])
    done = evaluate(job, task_runner)
    assert isinstance(done, FinishedEvaluation)
    assert (done.candidate, done.commit, done.split, done.attempt) == (
        "c0001",
        job.commit,
        "train",
        job.attempt,
    )
    assert done.rewards == {"t1": 1.0, "t4": 0.0} and done.errors == {}
    assert done.executor == {"kind": "recording", "node": "here"}
    assert task_runner.executor.calls == [["t1", "t4"]]
    finished = [e.data["task"] for e in signed_run.events if e.type == "task_finished"]
    assert finished == ["t1", "t4"]
    # evidence only: no score until the key holder certifies it
    assert signed_run.state.candidates["c0001"].score("train") is None
    signed_run.certify(done)
    assert signed_run.state.candidates["c0001"].score("train") == 0.5


def test_an_infrastructure_failure_is_a_failed_attempt_with_its_traceback_kept(
    signed_run: SignedRun, task_runner: TaskRunner
) -> None:
    job = _job(signed_run, ["t1"])
    task_runner.evaluator.fail = RuntimeError("the sandbox would not start")
    out = evaluate(job, task_runner)
    assert isinstance(out, list) and len(out) == 1
    (failed,) = out
    assert isinstance(failed, E.EvaluationFailed)
    assert failed.error == "RuntimeError: the sandbox would not start"
    assert failed.traceback is not None


def test_a_build_that_fails_by_the_candidates_fault_rejects_it(
    signed_run: SignedRun, task_runner: TaskRunner
) -> None:
    job = _job(signed_run, ["t1"])
    task_runner.evaluator.fail = BuildRejected("train", "loss is nan", {"step": "train"})
    failed, rejected = evaluate(job, task_runner)  # type: ignore[misc]
    assert isinstance(failed, E.EvaluationFailed) and failed.build == {"step": "train"}
    assert isinstance(rejected, E.CandidateRejected)
    assert (rejected.stage, rejected.reasons, rejected.commit) == (
        "train",
        ["loss is nan"],
        job.commit,
    )


def test_a_lost_cluster_ends_the_run_not_the_candidate(
    signed_run: SignedRun, task_runner: TaskRunner
) -> None:
    job = _job(signed_run, ["t1"])
    task_runner.evaluator.fail = ClusterLost("the head node went away")
    with pytest.raises(ClusterLost):
        evaluate(job, task_runner)


def test_operators_see_uncertified_runs_as_plain_rows(
    task_runner: TaskRunner, tmp_path: Path
) -> None:
    out = task_runner.run("c0001", "rollout", tmp_path, ["t2", "t1"])
    rows = TaskRunner.rows(out)
    assert [(r["task"], r["reward"], r["error"]) for r in rows] == [
        ("t1", 1.0, None),
        ("t2", 1.0, None),
    ]
    # the verifier's output and what the agent changed: GEPA's feedback, DGM's empty patches
    assert set(rows[0]) == {
        "task",
        "reward",
        "error",
        "trajectory",
        "stdout_tail",
        "stderr_tail",
        "verifier_tail",
        "app_changed",
    }


def test_children_stopped_at_a_stage_are_archived_in_a_real_run(tmp_path: Path) -> None:
    # every child must solve both fixed stage-1 tasks; the ones that do not are archived
    mini = make_mini(tmp_path / "proj", generations=2, children=3)
    out = mini.run_dir()
    sets = [
        "slots.select={operator: score_child_prop, config: {split: train, children: archived}}",
        "slots.gate={operator: keep_all}",
        "evaluator.stages=[{split: train, tasks: 2, min_score: 1.0, on_fail: archive}]",
    ]
    res = cli("run", mini.recipe, "--out", out, "--quiet", *[a for s in sets for a in ("--set", s)])
    assert res.exit_code == 0, res.stderr
    status = status_json(out)
    children = [c for c in status["candidates"] if c["parent"]]
    stopped = [c for c in children if c["stopped_at"]]
    assert stopped, [c["scores"] for c in children]
    for c in stopped:  # admitted with the stage's score, no train or gate record
        assert c["state"] == "admitted" and c["stopped_at"] == "train@1"
        assert c["scores"]["train"] is None and c["scores"]["gate"] is None
    gated = {e["data"]["id"]: e["data"] for e in events(out) if e["type"] == "candidate_gated"}
    assert all(gated[c["id"]]["stopped"]["score"] < 1.0 for c in stopped)
    assert cli("verify", out).exit_code == 0
    # a stopped child may be a parent (a stepping stone): the second generation could draw it
    assert status["state"] == "finished"
