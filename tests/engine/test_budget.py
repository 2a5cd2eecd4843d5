"""rsiframe.engine.budget: every costly step is refused, with its reason, before it would
overrun a limit; the guard keeps room for a child's worst case and the sealed anchor. The
states are folded from hand-written signed events (tests/support/runlog.py), no run."""

from __future__ import annotations

import json

import pytest

from rsiframe.archive import events as E
from rsiframe.archive.state import RunState
from rsiframe.engine.budget import (
    BudgetGuard,
    TaskCosts,
    in_flight_usage,
    pending_evaluations,
    pending_task_runs,
)
from rsiframe.recipe.schema import Budget
from tests.support.runlog import SEED, SignedRun


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


def test_generations_stop_at_the_limit(signed_run: SignedRun) -> None:
    signed_run.seed()
    guard = BudgetGuard(Budget(max_generations=1))
    assert guard.refuse_generation(signed_run.state) is None
    signed_run.generation(1)
    assert guard.refuse_generation(signed_run.state) == "generations reached 1"


@pytest.mark.parametrize(
    ("budget", "usage", "reason"),
    [
        ({"max_model_tokens": 100}, {"tokens": 100}, "model tokens reached 100"),
        ({"max_cost": 1.5}, {"tokens": 1, "cost": 1.5}, "cost reached 1.5"),
        (
            {"max_model_tokens": 100},
            {"tokens": 40, "refused": 1},
            "model tokens reached 100 (40 spent; the rest could not cover a request)",
        ),
    ],
)
def test_tokens_and_cost_from_the_archive_fail_closed(
    signed_run: SignedRun, budget: dict, usage: dict, reason: str
) -> None:
    signed_run.seed()
    guard = BudgetGuard(Budget(**budget))
    assert guard.exhausted(signed_run.state) is None
    signed_run.emit(E.UsageSpent(id=SEED, slot="evaluate", **usage))
    st = signed_run.state
    assert guard.exhausted(st) == reason
    assert guard.refuse_generation(st) == reason
    assert guard.refuse_candidate(st) is not None
    assert guard.refuse_evaluation(st, tasks=1) == reason


def test_a_gateway_refusal_ends_the_run_even_below_the_limit(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.emit(
        E.ModelCall(seq=1, candidate=SEED, slot="mutate", status=429, code="max_cost", error="no")
    )
    assert BudgetGuard(Budget()).exhausted(signed_run.state) == (
        "the model gateway refused a call: no"
    )


def test_a_child_is_refused_while_children_in_flight_could_spend_what_is_left(
    signed_run: SignedRun,
) -> None:
    """Tokens: each child in flight may spend as much as the costliest child so far; while
    one is being mutated and none got further, as much as is left (infinite)."""
    signed_run.seed()
    signed_run.propose("c0001", SEED, 1)
    guard = BudgetGuard(Budget(max_model_tokens=1000))
    assert in_flight_usage(signed_run.state) == (float("inf"), float("inf"))
    assert guard.refuse_candidate(signed_run.state) == (
        "model tokens would exceed 1000 with the children in flight, their evaluations and "
        "the champion's sealed evaluation"
    )
    signed_run.emit(
        E.ModelCall(
            seq=1, candidate="c0001", slot="mutate", prompt_tokens=200, completion_tokens=100
        )
    )
    signed_run.mutate("c0001")  # past its mutation: 300 tokens is the estimate per child
    assert in_flight_usage(signed_run.state) == (300, 0.0)
    assert guard.refuse_candidate(signed_run.state) is None  # 300 spent + 300 for a new one
    signed_run.propose("c0002", SEED, 1)  # one more in flight: 300 + 2 x 300 <= 1000
    assert guard.refuse_candidate(signed_run.state) is None
    signed_run.propose("c0003", SEED, 1)  # 300 + 3 x 300 > 1000
    assert guard.refuse_candidate(signed_run.state) is not None


def _evaluation_call(cid: str, split: str, tokens: int, seq: int) -> E.ModelCall:
    """A call an evaluation's agent made through the gateway (its consumer names the split)."""
    return E.ModelCall(
        seq=seq,
        candidate=cid,
        slot="evaluate",
        consumer=f"evaluate:{split}:{cid}",
        prompt_tokens=tokens,
    )


def test_the_sealed_anchor_keeps_model_tokens_sized_from_the_runs_evaluations(
    signed_run: SignedRun,
) -> None:
    """A run whose evaluations call the model holds, for the champion's sealed evaluation,
    its tasks at the most tokens per task any evaluation spent: the run stops short of it,
    and only the anchor may spend it (a run that ran dry before its anchor lost its score)."""
    costs = TaskCosts({"train": 1, "gate": 1}, ("train", "gate"), sealed=2)
    guard = BudgetGuard(Budget(max_model_tokens=1000), costs=costs)
    signed_run.seed()  # one task per split
    st = signed_run.state
    assert guard.anchor_hold(st) == 0  # no evaluation has called a model
    signed_run.emit(_evaluation_call(SEED, "sealed", 60, 1))
    signed_run.emit(_evaluation_call(SEED, "train", 100, 2))  # the costliest per task
    assert st.candidates[SEED].latest("train").tokens == 100  # type: ignore[union-attr]
    assert guard.anchor_hold(st) == 200  # 2 sealed tasks x 100
    st.reindex()  # as a resume from the state snapshot rebuilds it: from the attempts
    assert guard.anchor_hold(st) == 200
    assert guard.tokens_left(st) == 1000 - 160 - 200
    assert guard.tokens_left(st, reserved=True) == 1000 - 160
    signed_run.emit(E.ModelCall(seq=3, candidate="c0001", slot="mutate", prompt_tokens=640))
    assert st.tokens == 800
    reason = "model tokens reached 1000 (200 held for the champion's sealed evaluation)"
    assert guard.exhausted(st) == reason
    assert guard.refuse_evaluation(st, tasks=1) == reason
    assert guard.refuse_evaluation(st, reserved=True) is None  # the anchor may spend it
    assert guard.tokens_left(st) == 0


def test_a_refusal_the_hold_caused_stops_the_run_but_not_its_anchor(
    signed_run: SignedRun,
) -> None:
    guard = BudgetGuard(Budget(max_model_tokens=1000), costs=TaskCosts(sealed=1))
    signed_run.seed()
    signed_run.emit(_evaluation_call(SEED, "sealed", 300, 1))
    refused = E.ModelCall(seq=2, slot="mutate", status=429, code="max_model_tokens", error="no")
    signed_run.emit(refused)
    st = signed_run.state
    assert guard.exhausted(st) == "the model gateway refused a call: no"
    assert guard.refuse_evaluation(st, reserved=True) is None
    # a served model's refusal (tokens_refused) likewise
    signed_run.emit(E.UsageSpent(id=SEED, slot="evaluate", refused=1))
    assert guard.refuse_evaluation(st, reserved=True) is None
    # cost holds nothing back: a cost refusal stops the anchor too
    signed_run.emit(E.ModelCall(seq=3, slot="mutate", status=429, code="max_cost", error="$"))
    assert guard.refuse_evaluation(st, reserved=True) == "the model gateway refused a call: $"


def test_a_child_is_refused_while_its_evaluations_and_the_anchor_could_not_be_paid(
    signed_run: SignedRun,
) -> None:
    """A new child needs tokens for its own evaluations (train 2 + gate 2 tasks, at the
    run's 50 per task) and those of the children in flight, besides the anchor's hold."""
    costs = TaskCosts({"train": 2, "gate": 2}, ("train", "gate"), sealed=2)
    signed_run.seed()
    signed_run.emit(_evaluation_call(SEED, "train", 50, 1))  # 50 per task
    st = signed_run.state
    # spent 50; a new child: 4 x 50 = 200; the anchor: 2 x 50 = 100
    assert BudgetGuard(Budget(max_model_tokens=350), costs=costs).refuse_candidate(st) is None
    assert BudgetGuard(Budget(max_model_tokens=349), costs=costs).refuse_candidate(st)
    signed_run.child("c0001", gate=None)  # in flight, its train and gate not started
    assert BudgetGuard(Budget(max_model_tokens=550), costs=costs).refuse_candidate(st) is None
    assert BudgetGuard(Budget(max_model_tokens=549), costs=costs).refuse_candidate(st)


def test_evaluations_in_flight_are_counted_before_they_start(signed_run: SignedRun) -> None:
    signed_run.seed()  # 3 evaluations
    signed_run.child("c0001", gate=None)  # will need train and gate
    signed_run.start_evaluation("c0001", "train", 1)  # started: counted already
    st = signed_run.state
    assert pending_evaluations(st) == 1
    # 4 used + 1 pending + 2 for a new child + 1 reserved = 8
    assert BudgetGuard(Budget(max_evaluations=8)).refuse_candidate(st) is None
    assert BudgetGuard(Budget(max_evaluations=7)).refuse_candidate(st) == (
        "evaluations would exceed 7"
    )
    # the anchor's reserved evaluation is for the anchor only
    guard = BudgetGuard(Budget(max_evaluations=5))
    assert guard.refuse_evaluation(st) == "evaluations reached 5"
    assert guard.refuse_evaluation(st, reserved=True) is None


def test_task_runs_in_flight_count_a_proposed_childs_rollout_and_its_evaluations(
    signed_run: SignedRun,
) -> None:
    signed_run.seed()
    costs = TaskCosts({"train": 4, "gate": 3}, ("train", "gate"), uncertified=2, sealed=1)
    signed_run.propose("c0001", SEED, 1)
    assert pending_task_runs(signed_run.state, costs) == 2 + 4 + 3
    signed_run.emit(E.TasksRun(id="c0001", purpose="rollout", tasks=2))
    assert pending_task_runs(signed_run.state, costs) == 4 + 3  # its rollout ran
    signed_run.mutate("c0001")
    signed_run.start_evaluation("c0001", "train", 4)
    assert pending_task_runs(signed_run.state, costs) == 3  # gate not started yet


def test_wall_time_counts_every_session(
    signed_run: SignedRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    signed_run.seed()
    st = signed_run.state
    started = st.session_start
    assert started is not None
    guard = BudgetGuard(Budget(max_wall_seconds=60))
    monkeypatch.setattr("time.time", lambda: started + 59)
    assert guard.exhausted(st) is None
    monkeypatch.setattr("time.time", lambda: started + 61)
    assert guard.exhausted(st) == "wall time reached 60s"
    assert guard.refuse_candidate(st) == "wall time reached 60s"


def test_the_report_is_what_status_prints(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.child("c0001")
    report = BudgetGuard(Budget(max_candidates=4)).report(signed_run.state, now=0.0)
    assert report["limits"]["candidates"] == 4
    used = report["used"]
    assert (used["candidates"], used["evaluations"], used["generations"]) == (1, 5, 0)
    assert BudgetGuard(Budget()).tokens_left(signed_run.state) is None
    assert BudgetGuard(Budget(max_model_tokens=9)).tokens_left(signed_run.state) == 9


class _NoScan(dict[str, tuple[int, float]]):
    """``operator_usage`` that fails when iterated: the in-flight estimate must not scan
    every candidate that spent (a scan per proposal made a model run quadratic, #29)."""

    def items(self):  # type: ignore[override]
        raise AssertionError("in_flight_usage scanned every candidate's usage")

    def values(self):  # type: ignore[override]
        raise AssertionError("in_flight_usage scanned every candidate's usage")

    def __iter__(self):  # type: ignore[override]
        raise AssertionError("in_flight_usage scanned every candidate's usage")


def test_the_in_flight_estimate_is_kept_as_events_fold_not_scanned(signed_run: SignedRun) -> None:
    """The costliest child past its mutation, from the fold's running maximum: the same
    answer as the scan it replaces, without looking at the other candidates; a child still
    being mutated, a cut proposal's spending and later (record) spending all count right."""
    signed_run.seed()
    spent = {"c0001": (300, 0.5), "c0002": (900, 0.1), "c0003": (100, 2.0), "c0004": (5000, 9.0)}
    for seq, (cid, (tokens, cost)) in enumerate(spent.items(), start=1):
        signed_run.propose(cid, SEED, 1)
        signed_run.emit(
            E.ModelCall(seq=seq, candidate=cid, slot="mutate", prompt_tokens=tokens, cost_usd=cost)
        )
    for cid in ("c0001", "c0002", "c0003"):
        signed_run.mutate(cid)  # c0004 is still being mutated: its spending does not count
    st = signed_run.state
    usage, st.operator_usage = st.operator_usage, _NoScan(st.operator_usage)
    assert in_flight_usage(st) == (900 * 2, 2.0 * 2)  # one in flight and the new child
    st.operator_usage = usage
    signed_run.emit(
        E.ModelCall(seq=5, candidate="c0001", slot="record", prompt_tokens=700, cost_usd=0.0)
    )  # c0001's later operators spend too: 1000 tokens now
    signed_run.emit(E.CandidateAbandoned(id="c0004", reason="the mutation did not finish"))
    st = signed_run.state
    assert st.spent_max == (5000, 9.0)  # past its mutation now (cut), its spending counts
    usage, st.operator_usage = st.operator_usage, _NoScan(st.operator_usage)
    assert in_flight_usage(st) == (5000, 9.0)
    st.operator_usage = usage
    before = st.spent_max
    st.reindex()  # a snapshot's load rebuilds the index from the candidates
    assert st.spent_max == before


def test_only_a_served_models_usage_is_spent_outside_the_gateway(signed_run: SignedRun) -> None:
    """The gateway counts its own calls (evaluations' agents' included) in its ledger, and
    is told only what the run spent elsewhere: a served (D/T/H) model's usage. The
    ``evaluate`` slot's total holds both, and counted on resume, the agents' gateway calls
    came twice."""
    from rsiframe.gateway.runmodels import spent_elsewhere

    signed_run.seed()
    signed_run.emit(_evaluation_call(SEED, "train", 100, 1))
    signed_run.emit(E.UsageSpent(id=SEED, slot="evaluate", split="gate", tokens=30, cost=0.5))
    st = signed_run.state
    assert st.models_by_slot["evaluate"]["model_tokens"] == 130
    assert spent_elsewhere(st) == (30, 0.5)
