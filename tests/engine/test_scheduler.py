"""rsiframe.engine.scheduler: what runs next, decided from a folded state and the jobs in
flight, without a run. The state is folded from hand-written signed events
(tests/support/runlog.py); work in flight is a job in ``Inflight.jobs``."""

from __future__ import annotations

import pytest
import yaml

from rsiframe.archive import events as E
from rsiframe.engine.budget import BudgetGuard
from rsiframe.engine.certify import FinishedEvaluation
from rsiframe.engine.inflight import Inflight, Job
from rsiframe.engine.scheduler import (
    WAIT,
    Decision,
    Scheduler,
    candidate_id,
    grace_seconds,
    seed_failure,
)
from rsiframe.recipe.schema import Recipe
from tests.support.mini import recipe_text
from tests.support.runlog import SEED, SignedRun


def scheduler(
    run: SignedRun,
    *,
    k: int = 2,
    mode: str = "generational",
    children: int = 2,
    generations: int = 2,
    reflects: bool = False,
    **budget: int,
) -> Scheduler:
    """The mini recipe's scheduler over ``run``'s state (K, mode and budget as given)."""
    data = yaml.safe_load(recipe_text(generations=generations, children=children))
    data["concurrency"] = {"candidates": k, "mode": mode}
    data["budget"].update(budget)
    recipe = Recipe.model_validate(data)
    return Scheduler(recipe, run.state, BudgetGuard(recipe.budget), Inflight(k), reflects)


def in_flight(s: Scheduler, *cids: str) -> None:
    for cid in cids:
        s.inflight.jobs[cid] = [Job(cid, "mutate")]


def test_a_run_whose_seed_is_admitted_starts_generation_one(signed_run: SignedRun) -> None:
    signed_run.seed()
    assert scheduler(signed_run).next() == Decision("generation", generation=1)


def test_generational_proposes_the_generations_children_then_waits_for_them(
    signed_run: SignedRun,
) -> None:
    signed_run.seed()
    signed_run.generation(1)
    s = scheduler(signed_run, k=4, children=2)
    assert s.next() == Decision("propose", generation=1)
    signed_run.propose("c0001", SEED, 1)
    in_flight(s, "c0001")
    assert s.next() == Decision("propose", generation=1)  # K=4 leaves room; 1 of 2 children
    signed_run.propose("c0002", SEED, 1)
    in_flight(s, "c0002")
    assert s.next() == Decision(WAIT)  # the generation is full and in flight


def test_generational_reviews_a_generation_only_once_all_its_children_are_certified(
    signed_run: SignedRun,
) -> None:
    signed_run.seed()
    signed_run.generation(1)
    signed_run.child("c0001", gate=0.5, admit=None)  # certified, not gated
    signed_run.child("c0002", gate=None)  # committed, evaluations to come
    s = scheduler(signed_run)
    c1, c2 = signed_run.state.candidates["c0001"], signed_run.state.candidates["c0002"]
    assert not s.may_review(c1)
    assert scheduler(signed_run, mode="steady").may_review(c1)  # steady: as each one is
    signed_run.evaluate("c0002", "train", {"t1": 0.0})
    signed_run.evaluate("c0002", "gate", {"g1": 0.0})
    assert s.may_review(c1) and s.may_review(c2)
    assert s.next() == Decision(WAIT)  # certified but not gated: still unsettled
    signed_run.review("c0001")
    signed_run.review("c0002", admit=False)
    assert s.next() == Decision("generation", generation=2)


def test_reflect_is_due_once_its_generation_is_settled(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.generation(1)
    signed_run.child("c0001")
    s = scheduler(signed_run, reflects=True)
    assert s.next() == Decision("propose", generation=1)  # the generation is not full yet
    signed_run.child("c0002")
    assert s.next() == Decision("reflect", generation=1)
    signed_run.emit(E.GenerationReflected(generation=1, lessons="d" * 64))
    assert s.next() == Decision("generation", generation=2)


def test_the_last_generation_finishes_the_run(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.generation(1)
    signed_run.child("c0001")
    signed_run.child("c0002")
    assert scheduler(signed_run, generations=1).next() == Decision(
        "finish", state="finished", reason="completed 1 generation(s)"
    )


def test_the_candidate_budget_closes_the_generation_then_ends_the_run_finished(
    signed_run: SignedRun,
) -> None:
    signed_run.seed()
    signed_run.generation(1)
    s = scheduler(signed_run, children=3, max_candidates=1)
    assert s.next() == Decision("propose", generation=1)
    signed_run.propose("c0001", SEED, 1)
    in_flight(s, "c0001")
    assert s.next() == Decision(WAIT) and s.closed == {1}  # what is in flight ends first
    signed_run.mutate("c0001")
    signed_run.evaluate("c0001", "train", {"t1": 1.0})
    signed_run.evaluate("c0001", "gate", {"g1": 1.0})
    del s.inflight.jobs["c0001"]
    assert s.next() == Decision(WAIT)  # certified: its review comes first
    signed_run.review("c0001")
    # max_candidates is the run's plan: made, the run is finished (not a resource run out)
    assert s.next() == Decision("finish", state="finished", reason="candidates reached 1")


def test_the_evaluation_budget_keeps_room_for_a_child_and_the_sealed_anchor(
    signed_run: SignedRun,
) -> None:
    signed_run.seed()  # 3 evaluations
    signed_run.generation(1)
    # a child needs 2 more, and one stays reserved for the champion's sealed anchor: 6
    assert scheduler(signed_run, max_evaluations=6).next().kind == "propose"
    assert scheduler(signed_run, max_evaluations=5).next() == Decision(
        "finish", state="budget_exhausted", reason="evaluations would exceed 5"
    )


def test_steady_mode_proposes_whenever_a_slot_is_free(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.generation(1)
    s = scheduler(signed_run, k=2, mode="steady", children=4)
    signed_run.propose("c0001", SEED, 1)
    in_flight(s, "c0001")
    assert s.next() == Decision("propose", generation=1)
    signed_run.propose("c0002", SEED, 1)
    in_flight(s, "c0002")
    assert s.next() == Decision(WAIT)  # both slots busy
    del s.inflight.jobs["c0001"]
    assert s.next() == Decision("propose", generation=1)


def test_the_horizon_is_the_generations_start_for_transaction_slots_in_generational_mode(
    signed_run: SignedRun,
) -> None:
    signed_run.seed()
    s = scheduler(signed_run)
    s.generation_of["c0003"] = 2
    assert [s.horizon("c0003", slot) for slot in ("select", "mutate", "novelty")] == [2, 2, 2]
    assert s.horizon("c0003", "gate") is None and s.horizon("c0003", "record") is None
    assert s.horizon("c0099", "select") is None  # not proposed by this process
    steady = scheduler(signed_run, mode="steady")
    steady.generation_of["c0003"] = 2
    assert steady.horizon("c0003", "select") is None


def test_what_an_earlier_process_left_open_is_closed_first(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.generation(1)
    signed_run.propose("c0001", SEED, 1)  # its mutation never finished
    signed_run.child("c0002", gate=None)
    signed_run.start_evaluation("c0002", "train", 1)  # an attempt with no outcome
    s = scheduler(signed_run)
    in_flight(s, "c0001")
    assert s.stale() == E.EvaluationInterrupted(id="c0002", split="train", attempt=1)
    del s.inflight.jobs["c0001"]  # not this process's work after all
    stale = s.stale()
    assert stale == E.CandidateAbandoned(id="c0001", reason="the mutation did not finish")
    signed_run.emit(stale)
    signed_run.emit(s.stale())
    assert s.stale() is None


def test_a_run_needs_work_unless_it_ended_with_nothing_to_retry(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    attempt = signed_run.start_evaluation("c0001", "train", 1)
    signed_run.emit(E.EvaluationFailed(id="c0001", split="train", attempt=attempt, error="x"))
    s = scheduler(signed_run)
    assert s.needs_work(retry_failed=False)  # no terminal event: running
    signed_run.emit(E.RunInterrupted(reason="Ctrl-C"))
    assert s.needs_work(retry_failed=False)
    signed_run.emit(E.SessionStarted(resumed=True))
    signed_run.emit(E.RunFinished(state="finished", reason="done"))
    assert not s.needs_work(retry_failed=False)
    assert s.needs_work(retry_failed=True)  # the failed child is retried


def test_after_ctrl_c_nothing_new_starts_and_only_successes_are_kept(
    signed_run: SignedRun,
) -> None:
    signed_run.seed()
    signed_run.generation(1)
    s = scheduler(signed_run)
    assert s.next() == Decision("propose", generation=1)
    mutated = E.CandidateMutated(id="c0001", commit="a" * 40, tree="b" * 40)
    rejected = E.CandidateRejected(id="c0001", stage="mutate", reasons=["interrupted"])
    done = FinishedEvaluation("c0001", "a", "b", None, "train", 1, {}, {}, {}, None, 0.0, 1.0)
    assert all(s.keeps(x) for x in (mutated, rejected, done, [rejected]))
    s.stop(grace=0.0)
    assert s.stopping and s.keeps(mutated) and s.keeps(done)
    assert not s.keeps(rejected) and not s.keeps([rejected])
    assert s.next() == Decision(WAIT)


def test_a_seed_that_was_not_admitted_fails_the_run_with_its_first_error(
    signed_run: SignedRun,
) -> None:
    signed_run.start()
    signed_run.propose(SEED, None, 0)
    signed_run.mutate(SEED)
    attempt = signed_run.start_evaluation(SEED, "train", 1)
    error = "agent not found: python3 agent.py\nTraceback ..."
    signed_run.emit(E.EvaluationFailed(id=SEED, split="train", attempt=attempt, error=error))
    assert seed_failure(signed_run.state.candidates[SEED]) == (
        "the seed could not be evaluated: agent not found: python3 agent.py "
        "(fix it, then resume --retry-failed)"
    )


@pytest.mark.parametrize(
    ("value", "seconds"), [(None, 10.0), ("2.5", 2.5), ("-3", 0.0), ("x", 10.0)]
)
def test_the_grace_period_comes_from_the_environment(
    value: str | None, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv("RSIFRAME_GRACE_S", raising=False)
    else:
        monkeypatch.setenv("RSIFRAME_GRACE_S", value)
    assert grace_seconds() == seconds
    assert candidate_id(7) == "c0007"
