"""rsiframe.engine.transaction: one child from its parent to a commit or a rejection, without
a run. Real git (a candidate repository holding the mini seed), real guardrail and operator
calls; the operators are scripted here, the state is folded from hand-written signed events
(tests/support/runlog.py) and task runs go to an evaluator that runs nothing."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rsiframe.api import (
    Check,
    MutateContext,
    MutateOperator,
    Mutation,
    NoConfig,
    NoveltyContext,
    NoveltyOperator,
    Rollout,
    RolloutContext,
    RolloutOperator,
    SelectContext,
    Selection,
    SelectOperator,
    ValidateContext,
    ValidateOperator,
)
from rsiframe.archive import events as E
from rsiframe.engine.budget import BudgetGuard, TaskCosts
from rsiframe.engine.duplicates import TreeClaims
from rsiframe.engine.evaluation import TaskRunner
from rsiframe.engine.inflight import Inflight
from rsiframe.engine.taskruns import TaskRunMeter
from rsiframe.engine.transaction import RunFailure, Transaction
from rsiframe.evaluators.trialfolders import manifest
from rsiframe.recipe.schema import Budget
from rsiframe.repo.candidates import CANDIDATE_REFS, REJECTED_REFS, CandidateRepo
from rsiframe.repo.gittree import snapshot
from rsiframe.slots.calls import OperatorCalls, Timings
from rsiframe.slots.runview import StateView
from rsiframe.surface import Surface
from rsiframe.tasks.taskset import TaskLock, TaskSet
from tests.support.runlog import SEED, SignedRun
from tests.support.store import Store

CHILD = "c0001"
SPLIT = {"train": ["t1", "t2", "t3", "t4"], "gate": ["t5", "t6", "t7"], "sealed": ["t8"]}


class PickSeed(SelectOperator):
    name = "pick"

    def __init__(self, parent: str = SEED) -> None:
        super().__init__(NoConfig())
        self.parent = parent

    def select(self, ctx: SelectContext) -> Selection:
        return Selection(parent=self.parent, reason="scripted")


class Rerun(RolloutOperator):
    """Runs the parent on ``tasks`` train tasks (none: reuses nothing, runs nothing)."""

    name = "rerun"

    def __init__(self, tasks: list[str] | None = None) -> None:
        super().__init__(NoConfig())
        self.tasks = tasks

    def rollout(self, ctx: RolloutContext) -> Rollout:
        rows = ctx.run_train(self.tasks) if self.tasks else []
        return Rollout(trajectories=rows)


class Edit(MutateOperator):
    name = "edit"

    def __init__(self, edit: Callable[[Path], object]) -> None:
        super().__init__(NoConfig())
        self.edit = edit

    def mutate(self, ctx: MutateContext) -> Mutation:
        self.edit(ctx.workdir)
        return Mutation(description="scripted edit")


class Verdict(ValidateOperator, NoveltyOperator):
    """A validate or novelty check with a fixed verdict (and, for validate, an edit)."""

    name = "verdict"

    def __init__(self, ok: bool, edit: Callable[[Path], object] | None = None) -> None:
        super().__init__(NoConfig())
        self.ok, self.edit_tree = ok, edit

    def validate(self, ctx: ValidateContext) -> Check:
        if self.edit_tree is not None:
            self.edit_tree(ctx.workdir)
        return Check(ok=self.ok, reason="scripted verdict", output="checked")

    def novelty(self, ctx: NoveltyContext) -> Check:
        return Check(ok=self.ok, reason="seen before")


def raise_level(work: Path) -> None:
    (work / "config.yaml").write_text("level: 5\nstyle: plain\n")


class Rig:
    """A transaction over a real candidate repository holding the mini seed."""

    def __init__(self, run: SignedRun, taskset: TaskSet, task_runner: TaskRunner, root: Path):
        seed = root / "seed"
        seed.mkdir(parents=True)
        (seed / "config.yaml").write_text("level: 1\nstyle: plain\n")
        (seed / "agent.py").write_text("print('agent')\n")
        self.repo = CandidateRepo.create(root / "repo.git", root / "exports")
        snap = snapshot(seed)
        tree = self.repo.store(snap)
        commit = self.repo.commit(
            tree, None, "c0000: seed", f"{CANDIDATE_REFS}/{SEED}", entries=snap.entries
        )
        run.seed(commit=commit, tree=tree)
        self.run, self.root, self.store = run, root, Store()
        self.task_lock = TaskLock.freeze(taskset, SPLIT)
        self.task_runner = task_runner
        self.max_task_runs: int | None = None

    def transaction(self, **ops: object) -> Transaction:
        ops = {"select": PickSeed(), "rollout": Rerun(), "mutate": Edit(raise_level), **ops}
        view = StateView(self.run.state, self.repo, self.root)
        calls = OperatorCalls(ops, {s: "scripted" for s in ops}, view, 7, Timings())  # type: ignore[arg-type]
        guard = BudgetGuard(Budget(max_task_runs=self.max_task_runs), costs=TaskCosts(sealed=1))
        meter = TaskRunMeter(self.task_runner, guard, self.run.emit, lambda: None, Inflight(1))
        put = self.store.put
        surface = Surface(("config.yaml",))
        return Transaction(
            calls,
            self.repo,
            self.task_runner,
            self.task_lock,
            surface,
            [],
            put,
            self.run.emit,
            meter,
            TreeClaims(self.run.state, ordered=True),
        )

    def child(self, **ops: object) -> E.CandidateMutated | E.CandidateRejected:
        """Select, record the proposal as the engine does, then run the rest."""
        tx = self.transaction(**ops)
        proposed = tx.select(self.run.state, CHILD, 1)
        self.run.emit(proposed)
        parent = self.run.state.candidates[proposed.parent or ""]
        return tx.run(CHILD, parent, 1, self.root / "work" / CHILD)


@pytest.fixture
def rig(signed_run: SignedRun, taskset: TaskSet, task_runner: TaskRunner, tmp_path: Path) -> Rig:
    return Rig(signed_run, taskset, task_runner, tmp_path / "tx")


def test_select_proposes_a_child_of_the_admitted_parent_it_chose(rig: Rig) -> None:
    proposed = rig.transaction().select(rig.run.state, CHILD, 1)
    assert proposed == E.CandidateProposed(id=CHILD, parent=SEED, generation=1, reason="scripted")


@pytest.mark.parametrize("parent", ["c0042", "c0001"])
def test_a_select_that_names_no_admitted_candidate_fails_the_run(rig: Rig, parent: str) -> None:
    rig.run.child("c0001", gate=0.0, admit=False)  # c0001: declined
    with pytest.raises(RunFailure, match=f"chose '{parent}', which is not an admitted candidate"):
        rig.transaction(select=PickSeed(parent)).select(rig.run.state, "c0002", 1)


def test_a_change_inside_the_surface_is_committed_as_a_child_of_its_parent(rig: Rig) -> None:
    outcome = rig.child()
    assert isinstance(outcome, E.CandidateMutated), outcome
    seed = rig.run.state.candidates[SEED]
    assert outcome.parent_commit == seed.commit
    assert rig.repo.parents_of(outcome.commit) == [seed.commit]
    assert rig.repo.ref_target(f"{CANDIDATE_REFS}/{CHILD}") == outcome.commit
    assert rig.repo.read(outcome.commit, "config.yaml") == b"level: 5\nstyle: plain\n"
    assert outcome.changes == [{"kind": "modified", "path": "config.yaml"}]
    assert outcome.description == "scripted edit" and outcome.mutation in rig.store.blobs
    assert [e.type for e in rig.run.events[-2:]] == ["candidate_proposed", "rollout_done"]


def test_a_change_outside_the_surface_is_rejected_at_the_guardrail_and_kept(rig: Rig) -> None:
    def edit(work: Path) -> None:
        raise_level(work)
        (work / "agent.py").write_text("print('reads the answers')\n")

    outcome = rig.child(mutate=Edit(edit))
    assert isinstance(outcome, E.CandidateRejected)
    assert (outcome.stage, outcome.reasons) == (
        "guardrail",
        ["modified outside the surface: agent.py"],
    )
    assert outcome.violations[0]["path"] == "agent.py"
    # the evidence is kept under a ref of its own, never as a candidate
    assert rig.repo.ref_target(f"{REJECTED_REFS}/{CHILD}") == outcome.commit
    assert rig.repo.ref_target(f"{CANDIDATE_REFS}/{CHILD}") is None


def test_a_mutation_that_changes_nothing_is_rejected(rig: Rig) -> None:
    outcome = rig.child(mutate=Edit(lambda work: None))
    assert isinstance(outcome, E.CandidateRejected)
    assert (outcome.stage, outcome.reasons, outcome.commit) == (
        "mutate",
        ["the mutate changed nothing"],
        None,
    )


def test_validate_rejects_with_its_output(rig: Rig) -> None:
    outcome = rig.child(validate=Verdict(ok=False))
    assert isinstance(outcome, E.CandidateRejected)
    assert (outcome.stage, outcome.reasons, outcome.output) == (
        "validate",
        ["scripted verdict"],
        "checked",
    )


def test_a_validate_step_that_changes_the_tree_outside_the_surface_is_rejected(
    rig: Rig,
) -> None:
    touch = Verdict(ok=True, edit=lambda work: (work / "agent.py").write_text("cheat = 1\n"))
    outcome = rig.child(validate=touch)
    assert isinstance(outcome, E.CandidateRejected)
    assert (outcome.stage, outcome.reasons) == ("validate", ["the validate step changed the tree"])
    assert outcome.violations[0]["path"] == "agent.py"


def test_novelty_rejects_a_tree_it_has_seen(rig: Rig) -> None:
    outcome = rig.child(novelty=Verdict(ok=False))
    assert isinstance(outcome, E.CandidateRejected)
    assert (outcome.stage, outcome.reasons) == ("novelty", ["seen before"])
    assert rig.repo.ref_target(f"{CANDIDATE_REFS}/{CHILD}") is None


def test_an_operator_that_raises_rejects_the_child_with_its_traceback(rig: Rig) -> None:
    def crash(work: Path) -> None:
        raise ValueError("no idea")

    outcome = rig.child(mutate=Edit(crash))
    assert isinstance(outcome, E.CandidateRejected)
    assert (outcome.stage, outcome.reasons) == (
        "mutate",
        ["mutate operator failed: ValueError: no idea"],
    )
    assert outcome.traceback is not None
    assert b"ValueError: no idea" in rig.store.blobs[outcome.traceback]


def test_a_minibatch_the_budget_refused_a_model_call_rejects_the_child_at_stage_budget(
    rig: Rig,
) -> None:
    """Its rows would carry the budget's failures, not the parent's: the child is rejected
    for the budget, with the refusal as its reason (no traceback: not a bug)."""
    from rsiframe.engine.evaluation import BudgetRefused

    why = "the model gateway refused this evaluation's agent a call for the run's budget"

    def refused(work: Path) -> None:
        raise BudgetRefused(why)  # as TaskRunner.run raises it inside run_train

    outcome = rig.child(mutate=Edit(refused))
    assert isinstance(outcome, E.CandidateRejected)
    assert (outcome.stage, outcome.reasons, outcome.traceback) == ("budget", [why], None)


def test_a_rollout_runs_the_parent_and_charges_its_task_runs(rig: Rig) -> None:
    outcome = rig.child(rollout=Rerun(["t1", "t2", "t5"]))  # t5 is no train task
    assert isinstance(outcome, E.CandidateMutated)
    assert rig.task_runner.executor.calls == [["t1", "t2"]]
    charged = [e.data for e in rig.run.events if e.type == "tasks_run"]
    # which tasks: GEPA accepts on exactly the rollout's (issue 31)
    assert charged == [{"id": CHILD, "purpose": "rollout", "tasks": 2, "task_ids": ["t1", "t2"]}]


def test_a_rollout_beyond_the_task_run_budget_rejects_the_child_at_stage_budget(
    rig: Rig,
) -> None:
    rig.max_task_runs = 3 + 1 + 1  # the seed's 3, the anchor's 1: one task run is left
    outcome = rig.child(rollout=Rerun(["t1", "t2"]))
    assert isinstance(outcome, E.CandidateRejected)
    assert outcome.stage == "budget"
    assert outcome.reasons == ["task runs would exceed 5 (3 used, 2 more asked)"]
    assert rig.task_runner.executor.calls == []  # nothing ran


def test_the_work_folder_is_a_fresh_copy_of_the_parent(rig: Rig) -> None:
    work = rig.root / "work" / CHILD
    work.mkdir(parents=True)
    (work / "left-over.txt").write_text("from an earlier attempt\n")
    seen: list[list[str]] = []
    outcome = rig.child(
        mutate=Edit(lambda w: (seen.append(sorted(p.name for p in w.iterdir())), raise_level(w)))
    )
    assert seen == [["agent.py", "config.yaml"]]
    assert isinstance(outcome, E.CandidateMutated)
    shutil.rmtree(work)


class Counting(MutateOperator):
    """Writes a different level each call; remembers what each call was told."""

    name = "counting"

    def __init__(self) -> None:
        super().__init__(NoConfig())
        self.told: list[tuple[str, ...]] = []
        self.draws: list[float] = []

    def mutate(self, ctx: MutateContext) -> Mutation:
        self.told.append(ctx.rejected_as_similar)
        self.draws.append(ctx.rng.random())
        (ctx.workdir / "config.yaml").write_text(f"level: {len(self.told) + 1}\nstyle: plain\n")
        return Mutation(description=f"level {len(self.told) + 1}")


class TooSimilar(NoveltyOperator):
    """Sends the child back (``retry``) for its first ``times`` checks, then says ``ok``."""

    name = "too_similar"

    def __init__(self, times: int) -> None:
        super().__init__(NoConfig())
        self.times = times
        self.attempts: list[int] = []

    def novelty(self, ctx: NoveltyContext) -> Check:
        self.attempts.append(ctx.attempt)
        if ctx.attempt < self.times:
            return Check(ok=False, reason=f"too similar #{ctx.attempt}", retry=True)
        return Check(ok=True)


def test_a_novelty_retry_sends_the_child_back_to_mutate_with_the_reasons(rig: Rig) -> None:
    mutate, novelty = Counting(), TooSimilar(times=2)
    outcome = rig.child(mutate=mutate, novelty=novelty)
    assert isinstance(outcome, E.CandidateMutated)
    assert novelty.attempts == [0, 1, 2]
    assert mutate.told == [(), ("too similar #0",), ("too similar #0", "too similar #1")]
    assert len(set(mutate.draws)) == 3  # each re-proposal draws from an RNG of its own
    assert outcome.description == "level 4"  # the third proposal is the one committed
    report = json.loads(rig.store.blobs[outcome.mutation or ""])
    assert [r["reason"] for r in report["details"]["novelty_reproposals"]] == [
        "too similar #0",
        "too similar #1",
    ]


def test_the_engine_stops_a_novelty_that_retries_forever(rig: Rig) -> None:
    from rsiframe.api import MAX_REPROPOSALS

    mutate, novelty = Counting(), TooSimilar(times=10_000)
    outcome = rig.child(mutate=mutate, novelty=novelty)
    assert isinstance(outcome, E.CandidateRejected)
    assert outcome.stage == "novelty"
    assert len(mutate.told) == MAX_REPROPOSALS + 1
    assert len(outcome.reasons) == MAX_REPROPOSALS + 1
    assert outcome.reasons[-1] == f"proposal {MAX_REPROPOSALS + 1}: too similar #{MAX_REPROPOSALS}"


class TreesSeen(TooSimilar):
    """:class:`TooSimilar` that remembers the tree of each proposal it judged."""

    name = "trees_seen"

    def __init__(self, times: int) -> None:
        super().__init__(times)
        self.trees: list[str] = []

    def novelty(self, ctx: NoveltyContext) -> Check:
        self.trees.append(ctx.tree)
        return super().novelty(ctx)


def test_a_proposal_novelty_sent_back_holds_no_tree(rig: Rig) -> None:
    """No event records a re-proposed child's earlier tree, so a resumed run does not hold
    it: neither may the live run (a later child with that tree is not its duplicate)."""
    novelty = TreesSeen(times=1)
    tx = rig.transaction(mutate=Counting(), novelty=novelty)
    proposed = tx.select(rig.run.state, CHILD, 1)
    rig.run.emit(proposed)
    parent = rig.run.state.candidates[proposed.parent or ""]
    outcome = tx.run(CHILD, parent, 1, rig.root / "work" / CHILD)
    assert isinstance(outcome, E.CandidateMutated)
    rig.run.emit(outcome)
    first, last = novelty.trees
    assert first != last and outcome.tree == last
    resumed = TreeClaims(rig.run.state, ordered=True)
    assert resumed.claim("c0002", first) is None
    assert tx.claims.claim("c0002", first) is None  # was: 'c0001' (the live run only)
    assert tx.claims.claim("c0003", last) == CHILD


def test_a_mutation_folder_left_by_an_earlier_mutation_is_the_parents_export_again(
    rig: Rig, tmp_path: Path
) -> None:
    """The engine sets a candidate's mutation folder aside and writes the next one over
    it (``Spares``, ``exportdir.copy_into``). Whatever the earlier mutation left, the next
    mutate operator sees exactly the parent's export (names, kinds, bytes, modes, folders
    755), nothing is written through a link it left, and only its own change is committed."""
    work = rig.root / "work" / CHILD
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    (work / "deep" / "er").mkdir(parents=True)  # what an earlier mutation left
    (work / "deep").chmod(0o700)
    (work / "planted.txt").write_text("outside the surface")
    (work / "config.yaml").write_text("level: 99\nstyle: plain\n")
    (work / "agent.py").symlink_to(outside)
    work.chmod(0o777)
    seen: list[object] = []

    def look(w: Path) -> None:
        seen.append(manifest(w))
        raise_level(w)

    tx = rig.transaction(mutate=Edit(look))
    proposed = tx.select(rig.run.state, CHILD, 1)
    rig.run.emit(proposed)
    seed = rig.run.state.candidates[SEED]
    outcome = tx.run(CHILD, seed, 1, work)
    assert seen == [manifest(tx.export(seed))]
    assert outside.read_text() == "outside\n"
    assert isinstance(outcome, E.CandidateMutated), outcome
    assert outcome.changes == [{"kind": "modified", "path": "config.yaml"}]
    assert os.lstat(work).st_mode & 0o777 == 0o755
