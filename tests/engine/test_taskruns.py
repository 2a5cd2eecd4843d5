"""``budget.max_task_runs``: every task a run executes, counted from the signed archive;
the meter that charges uncertified runs (rollout, minibatch) before they start, without a run.

Real runs on the mini experiment (tests/support/mini.py) with a rollout that reruns the parent
and GEPA's ``minibatch`` validation, so certified and uncertified task runs both occur.
The agent appends one line per execution to a log outside the run (``process``
sandbox), an independent count of what really ran.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rsiframe.engine.budget import BudgetGuard, TaskCosts
from rsiframe.engine.evaluation import TaskRunner
from rsiframe.engine.hooks import Lifecycle
from rsiframe.engine.inflight import Inflight
from rsiframe.engine.taskruns import TaskRunMeter, TaskRunsRefused
from rsiframe.recipe.schema import Budget
from tests.support.cli import cli, cli_proc, events, status_json
from tests.support.mini import AGENT, Mini, make_mini
from tests.support.runlog import SEED, SignedRun

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


# -- the meter, without a run (tests/support/runlog.py, tests/support/fakes.py) -------------


def _meter(
    signed_run: SignedRun, task_runner: TaskRunner, max_task_runs: int, synced: list[int]
) -> TaskRunMeter:
    """A meter charging to ``signed_run``; ``synced`` gets the number of events at each sync."""
    guard = BudgetGuard(Budget(max_task_runs=max_task_runs), costs=TaskCosts(sealed=2))
    return TaskRunMeter(
        task_runner,
        guard,
        signed_run.emit,
        lambda: synced.append(len(signed_run.events)),
        Inflight(1),
    )


def test_a_run_is_charged_and_durable_before_its_tasks_start(
    signed_run: SignedRun, task_runner: TaskRunner, tmp_path: Path
) -> None:
    signed_run.seed()  # 3 task runs
    signed_run.propose("c0001", SEED, 1)
    synced: list[int] = []
    meter = _meter(signed_run, task_runner, 20, synced)
    seen = []
    real_run = task_runner.evaluator.run

    def watching(*args, **kw):  # type: ignore[no-untyped-def]
        seen.append((signed_run.events[-1].type, list(synced)))
        return real_run(*args, **kw)

    task_runner.evaluator.run = watching  # type: ignore[method-assign]
    rows = meter.run("c0001", "rollout", tmp_path, ["t1", "t5"])
    assert [(r["task"], r["reward"]) for r in rows] == [("t1", 1.0), ("t5", 0.0)]
    assert seen == [("tasks_run", [len(signed_run.events)])]  # appended and synced first
    assert signed_run.events[-1].data == {
        "id": "c0001",
        "purpose": "rollout",
        "tasks": 2,
        "task_ids": ["t1", "t5"],
    }
    assert signed_run.state.task_runs == 3 + 2


def test_a_run_past_the_limit_is_refused_before_anything_runs(
    signed_run: SignedRun, task_runner: TaskRunner, tmp_path: Path
) -> None:
    signed_run.seed()  # 3 used; the sealed anchor keeps 2 of 10: 5 left
    signed_run.propose("c0001", SEED, 1)
    signed_run.propose("c0002", SEED, 1)
    meter = _meter(signed_run, task_runner, 10, [])
    before = len(signed_run.events)
    with pytest.raises(TaskRunsRefused, match=r"task runs would exceed 10 \(3 used, 6 more"):
        meter.run("c0001", "minibatch", tmp_path, [f"t{i}" for i in range(1, 7)])
    assert meter.refused == {"c0001": "task runs would exceed 10 (3 used, 6 more asked)"}
    assert len(signed_run.events) == before and task_runner.evaluator.runs == []
    assert meter.run("c0002", "minibatch", tmp_path, ["t1"])  # what fits still runs


def test_a_charge_counts_until_the_writer_folds_it(
    signed_run: SignedRun, task_runner: TaskRunner, tmp_path: Path
) -> None:
    """Workers charge before the writer folds: the meter counts its own charges until the
    TASK_RUNS_CHARGED hook says the fold has them (then they are in the state)."""
    signed_run.seed()
    signed_run.propose("c0001", SEED, 1)
    signed_run.propose("c0002", SEED, 1)
    folded = _meter(signed_run, task_runner, 3 + 4 + 2, [])
    signed_run.hooks.add_hook(Lifecycle.TASK_RUNS_CHARGED, folded.on_charged)
    folded.run("c0001", "rollout", tmp_path, ["t1", "t2"])
    folded.run("c0001", "rollout", tmp_path, ["t3", "t4"])  # exactly fits
    unhooked = _meter(signed_run, task_runner, 3 + 4 + 4 + 2, [])
    unhooked.run("c0002", "rollout", tmp_path, ["t1", "t2"])
    with pytest.raises(TaskRunsRefused):  # 2 in the state and 2 it still holds
        unhooked.run("c0002", "rollout", tmp_path, ["t3", "t4"])


def test_a_workers_charge_is_appended_by_the_writer(
    signed_run: SignedRun, task_runner: TaskRunner, tmp_path: Path
) -> None:
    signed_run.seed()
    signed_run.propose("c0001", SEED, 1)
    meter = _meter(signed_run, task_runner, 100, [])
    writers = []
    signed_run.hooks.add_hook(
        Lifecycle.TASK_RUNS_CHARGED, lambda notice: writers.append(threading.get_ident())
    )
    rows: list[list[dict]] = []
    worker = threading.Thread(
        target=lambda: rows.append(meter.run("c0001", "rollout", tmp_path, ["t1"]))
    )
    worker.start()
    while worker.is_alive():
        meter.inflight.drain(timeout=0.05)
    worker.join()
    assert writers == [threading.get_ident()] and len(rows[0]) == 1
