"""``budget.max_task_runs``: every task a run executes, counted from the signed archive.

Real runs on the mini experiment of conftest.py with a rollout that reruns the parent
and GEPA's ``minibatch`` validation, so certified and uncertified task runs both occur.
The agent appends one line per execution to a log outside the run (``process``
sandbox), an independent count of what really ran.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import AGENT, Mini, cli, cli_proc, events, make_mini, status_json

from rsiframe.archive.state import RunState
from rsiframe.engine.budget import BudgetGuard, TaskCosts
from rsiframe.recipe.schema import Budget

LIMIT = 60
# mini: train 4, gate 4, sealed 2 tasks; a child: rollout 2 + minibatch 2 + train 4 + gate 4
PER_CHILD, SEALED = 12, 2


def _mini(root: Path, generations: int = 12) -> tuple[Mini, Path]:
    mini = make_mini(root, generations=generations, children=2, sandbox="process")
    log = root / "ran.log"
    (mini.seed / "agent.py").write_text(AGENT + f"open({str(log)!r}, 'a').write('x\\n')\n")
    text = mini.recipe.read_text()
    text = text.replace(
        "  rollout: {operator: local}",
        "  rollout: {operator: local, config: {reuse_certified: false, max_tasks: 2}}\n"
        "  validate: {operator: minibatch, config: {size: 2, ties: true}}",
    )
    mini.recipe.write_text(text)
    return mini, log


def _ran(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def _charged(evs: list[dict]) -> int:
    """The charges as the events state them (evaluation_started, tasks_run)."""
    return sum(e["data"]["tasks"] for e in evs if e["type"] in ("evaluation_started", "tasks_run"))


def test_negative_max_task_runs_is_one_line_exit_2(mini: Mini) -> None:
    res = cli("recipe", "check", mini.recipe, "--set", "budget.max_task_runs=-1")
    assert res.exit_code == 2
    assert "budget.max_task_runs" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Mini, Path]:
    root = tmp_path_factory.mktemp("taskruns")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RSIFRAME_KEY_DIR", str(root / "keys"))
        mini, log = _mini(root / "proj")
        res = cli(
            "run", mini.recipe, "--out", mini.run_dir(), "--quiet",
            "--set", f"budget.max_task_runs={LIMIT}",
        )  # fmt: skip
        assert res.exit_code == 0, res.stderr
        assert cli("verify", mini.run_dir()).exit_code == 0
    return mini, log


def test_the_count_is_every_task_executed_and_stops_at_the_limit(
    limited: tuple[Mini, Path],
) -> None:
    mini, log = limited
    st = status_json(mini.run_dir())
    used, limits = st["budget"]["used"], st["budget"]["limits"]
    evs = events(mini.run_dir())
    purposes = {e["data"]["purpose"] for e in evs if e["type"] == "tasks_run"}
    assert purposes == {"rollout", "minibatch"}  # uncertified runs happened, and count
    # the archive's count is what the agent really executed, every kind of run included
    assert used["task_runs"] == _ran(log) == _charged(evs)
    assert sum(1 for e in evs if e["type"] == "task_finished") < used["task_runs"]
    assert limits["task_runs"] == LIMIT and used["task_runs"] <= LIMIT
    # fail closed: it stopped because one more child's worst case would not fit
    assert st["state"] == "budget_exhausted"
    assert f"task runs would exceed {LIMIT}" in st["reason"]
    assert used["task_runs"] + PER_CHILD + SEALED > LIMIT
    table = cli("status", mini.run_dir()).stdout
    assert f"{used['task_runs']}/{LIMIT} task runs" in table


def test_a_minibatch_beyond_the_budget_is_refused_and_the_run_ends_exhausted(
    tmp_path: Path,
) -> None:
    # a worst case that says a child costs nothing (as an operator that under-declares
    # what it runs would): proposals pass, the charge before each run refuses the one that
    # would not fit
    mini, log = _mini(tmp_path / "proj")
    from rsiframe.engine import taskruns

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(taskruns, "task_costs", lambda stages, ops: TaskCosts(sealed=SEALED))
        # one child at a time: with two in flight, the second child's train evaluation can
        # be the charge that does not fit (the run then ends once the first settles), so
        # the minibatch this test is about may never be asked for
        res = cli(
            "run", mini.recipe, "--out", mini.run_dir(), "--quiet",
            "--set", "budget.max_task_runs=24", "--set", "concurrency.candidates=1",
        )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    st = status_json(mini.run_dir())
    assert st["state"] == "budget_exhausted"
    assert "task runs would exceed 24" in st["reason"]
    refused = [c for c in st["candidates"] if c["reasons"][:1] and "budget:" in c["reasons"][0]]
    assert len(refused) == 1
    assert st["budget"]["used"]["task_runs"] == _ran(log) <= 24 - SEALED
    kinds = {e["data"]["purpose"] for e in events(mini.run_dir()) if e["type"] == "tasks_run"}
    assert kinds == {"rollout", "minibatch"}


def test_a_killed_run_resumes_with_its_count_and_pays_nothing_twice(tmp_path: Path) -> None:
    mini, log = _mini(tmp_path / "proj")
    run = mini.run_dir()
    args = ["run", mini.recipe, "--out", run, "--quiet", "--set", f"budget.max_task_runs={LIMIT}"]
    env = {"RSIFRAME_FAULT": "kill:after:tasks_run:3"}  # charged, its tasks not started
    res = cli_proc(*args, env={**os.environ, **env})
    assert res.returncode == -9, res.stderr
    evs = events(run)
    last = [e for e in evs if e["type"] == "tasks_run"][-1]["data"]["tasks"]
    crashed = status_json(run)["budget"]["used"]["task_runs"]
    assert crashed == _charged(evs) == _ran(log) + last  # paid before it ran
    res = cli_proc("resume", run, "--quiet")
    assert res.returncode == 0, res.stderr
    st = status_json(run)
    evs = events(run)
    assert st["budget"]["used"]["task_runs"] == _charged(evs) == _ran(log) + last
    assert st["budget"]["used"]["task_runs"] <= LIMIT
    assert st["state"] == "budget_exhausted"


def test_fold_counts_older_archives_by_finished_tasks() -> None:
    from rsiframe.archive.log import Event

    st = RunState(verifier=None)  # type: ignore[arg-type]
    seq = iter(range(100))

    def ev(type_: str, **data: object) -> Event:
        return Event(seq=next(seq), ts=0.0, type=type_, data=data, prev="", hash="")

    st.apply(ev("candidate_proposed", id="c0000", parent=None, generation=0))
    st.apply(ev("evaluation_started", id="c0000", split="train", attempt=1))  # no tasks
    for t in ("t1", "t2", "t3"):
        st.apply(ev("task_finished", id="c0000", split="train", attempt=1, task=t))
    st.apply(ev("evaluation_started", id="c0000", split="gate", attempt=1, tasks=4))
    st.apply(ev("task_finished", id="c0000", split="gate", attempt=1, task="g1"))
    assert st.task_runs == 3 + 4


def test_the_guard_keeps_room_for_a_childs_worst_case_and_the_sealed_anchor() -> None:
    costs = TaskCosts({"train": 4, "gate": 4}, ("train", "gate"), uncertified=3, sealed=2)
    guard = BudgetGuard(Budget(max_task_runs=30), costs=costs)
    st = RunState(verifier=None)  # type: ignore[arg-type]
    st.task_runs = 30 - 11 - 2  # exactly one child (3 + 8) and the anchor (2) fit
    assert guard.refuse_candidate(st) is None
    st.task_runs += 1
    assert guard.refuse_candidate(st) == "task runs would exceed 30"
    # a child's evaluation may not eat the anchor's room; the anchor may
    assert guard.refuse_evaluation(st, tasks=4) is None
    st.task_runs = 26
    assert guard.refuse_evaluation(st, tasks=4) == "task runs would exceed 30"
    assert guard.refuse_evaluation(st, tasks=4, reserved=True) is None
    assert guard.refuse_task_runs(st, 2) is None  # the anchor's 2 stay free
    assert guard.refuse_task_runs(st, 3) == "task runs would exceed 30 (26 used, 3 more asked)"
    assert guard.refuse_task_runs(st, 2, unfolded=1) is not None  # charged, not yet folded
    assert guard.report(st)["used"]["task_runs"] == 26
    assert json.dumps(guard.limits())  # plain data for status --json


def test_the_viewer_budget_line_shows_task_runs() -> None:
    from viewer.fmt import budget_line

    line = budget_line({"used": {"evaluations": 6, "task_runs": 152}, "limits": {"task_runs": 200}})
    assert line == "evals 6 · task runs 152/200"


@pytest.mark.e2e
def test_the_gepa_recipe_stops_at_its_task_run_budget_on_sat3(tmp_path: Path) -> None:
    from conftest import REPO

    out, limit = tmp_path / "gepa", 200
    res = cli(
        "run", REPO / "recipes" / "sat3" / "gepa.yaml", "--out", out, "--quiet",
        "--set", f"budget.max_task_runs={limit}", "--set", "budget.max_evaluations=null",
        "--set", "budget.max_generations=100", "--set", "budget.max_candidates=null",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert cli("verify", out).exit_code == 0
    st, evs = status_json(out), events(out)
    used = st["budget"]["used"]["task_runs"]
    minibatches = [e["data"] for e in evs if e["type"] == "tasks_run"]
    assert minibatches and all(m == {**m, "purpose": "minibatch", "tasks": 8} for m in minibatches)
    finished = sum(1 for e in evs if e["type"] == "task_finished")
    assert used == finished + 8 * len(minibatches) <= limit
    # minibatch-rejected children paid for their 8 tasks, and nothing more
    rejected = [c for c in st["candidates"] if c["state"] == "rejected"]
    assert all(c["reasons"][0].startswith("validate: minibatch [") for c in rejected)
    assert st["state"] == "budget_exhausted" and st["reason"] == f"task runs would exceed {limit}"
    # sat3: train 24, gate 24, sealed 12; a GEPA child's worst case is 8 + 24 + 24
    assert used + 56 + 12 > limit


def test_a_childs_worst_case_comes_from_its_stages_and_what_its_operators_declare() -> None:
    from rsiframe.engine.evaluation import Stages
    from rsiframe.engine.taskruns import task_costs
    from rsiframe.operators.minibatch import Minibatch, MinibatchConfig
    from rsiframe.operators.rollout import LocalRollout, LocalRolloutConfig
    from rsiframe.operators.validate import Command, CommandConfig
    from rsiframe.recipe.schema import StageSpec

    split = {s: [f"{s}{i}" for i in range(n)] for s, n in (("train", 24), ("gate", 24))}
    split["sealed"] = [f"s{i}" for i in range(12)]
    dgm = Stages(
        [StageSpec(split="train", tasks=6, min_score=0.1), StageSpec(split="train")], split
    )
    reuse, rerun = (
        LocalRollout(LocalRolloutConfig()),
        LocalRollout(LocalRolloutConfig(reuse_certified=False)),
    )
    costs = task_costs(dgm, {"rollout": reuse, "validate": Minibatch(MinibatchConfig(size=8))})
    assert costs.per_split == {"train@1": 6, "train": 24, "gate": 24}
    assert (costs.uncertified, costs.sealed, costs.per_child) == (8, 12, 62)
    plain = task_costs(
        Stages([], split), {"rollout": rerun, "validate": Command(CommandConfig(command="true"))}
    )
    assert plain.child_splits == ("train", "gate") and plain.uncertified == 24 + 0
    assert task_costs(Stages([], split), {}).per_child == 48  # hill-climbing's child on sat3
