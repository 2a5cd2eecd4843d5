"""rsiframe.archive.state: run state as a fold over signed events; scores only from
certificates that verify and bind this run, candidate, commit, tree, recipe, evaluator and
task set. Hand-written events (tests/support/runlog.py), no run."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe.archive import events as E
from rsiframe.archive.log import Event, read_events
from rsiframe.archive.state import RunState, fold
from rsiframe.certs.signing import Signer
from rsiframe.engine.certify import certify
from rsiframe.errors import ArchiveCorrupt
from rsiframe.util.digest import canonical_json
from tests.support.runlog import RUN_ID, SEED, SignedRun, commit_of, rebound, tree_of


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


# -- the fold, from hand-written signed events (tests/support/runlog.py) -----------------


def test_a_seed_folds_to_admitted_with_a_score_per_split(signed_run: SignedRun) -> None:
    signed_run.seed(gate=0.25)
    st = signed_run.state
    seed = st.candidates[SEED]
    assert (seed.state, seed.is_seed, seed.required_splits) == (
        "admitted",
        True,
        ("train", "gate", "sealed"),
    )
    assert [seed.score(s) for s in ("train", "gate", "sealed")] == [0.25, 0.25, 0.25]
    assert (st.records, st.evaluations, st.problems) == (3, 3, [])
    assert st.champion() is seed and st.admitted() == [seed]
    assert st.run_id == RUN_ID and st.seed_commit == commit_of(SEED)


def test_a_child_moves_through_each_state_one_event_at_a_time(signed_run: SignedRun) -> None:
    signed_run.seed()
    c = "c0001"

    def state() -> str:
        return signed_run.state.candidates[c].state

    signed_run.propose(c, SEED, 1)
    assert state() == "proposed" and signed_run.state.children() == 1
    signed_run.mutate(c)
    assert state() == "mutated" and signed_run.state.candidates[c].next_split() == "train"
    attempt = signed_run.start_evaluation(c, "train", 1)
    assert state() == "evaluating"
    assert signed_run.state.candidates[c].open_attempt() is not None
    signed_run.certify(signed_run.finished(c, "train", attempt, {"t1": 1.0}))
    assert state() == "evaluating" and signed_run.state.candidates[c].next_split() == "gate"
    signed_run.evaluate(c, "gate", {"g1": 1.0, "g2": 0.0})
    assert state() == "certified" and signed_run.state.candidates[c].score("gate") == 0.5
    signed_run.emit(E.CandidateGated(id=c, admit=False, reason="no better"))
    assert state() == "declined" and c in signed_run.state.active  # not recorded yet
    signed_run.emit(E.CandidateRecorded(id=c, notes={"n": 1}))
    assert c not in signed_run.state.active
    assert signed_run.state.champion().id == SEED  # a declined child is never champion


def test_task_results_alone_are_never_a_score(signed_run: SignedRun) -> None:
    """Evidence (task_finished) says what a task returned; only a certificate scores."""
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    attempt = signed_run.start_evaluation("c0001", "train", 1)
    signed_run.emit(
        E.TaskFinished(id="c0001", split="train", attempt=attempt, task="t1", reward=1.0)
    )
    c = signed_run.state.candidates["c0001"]
    assert c.score("train") is None and c.record("train") is None


def test_a_certificate_signed_by_another_key_is_no_score(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    attempt = signed_run.start_evaluation("c0001", "train", 1)
    forger = Signer(Ed25519PrivateKey.generate())
    done = signed_run.finished("c0001", "train", attempt, {"t1": 1.0})
    signed_run.certify(done, signer=forger)
    c = signed_run.state.candidates["c0001"]
    assert c.score("train") is None and c.latest("train").status == "invalid"
    assert c.state == "failed"  # an invalid certificate waits for an explicit retry
    assert "certificate rejected" in signed_run.state.problems[-1]


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        ("run_id", "bound to another run"),
        ("recipe_digest", "recipe digest differs"),
        ("evaluator_fingerprint", "evaluator differs"),
        ("taskset_fingerprint", "task set differs"),
    ],
)
def test_a_certificate_bound_to_another_run_recipe_evaluator_or_task_set_is_refused(
    signed_run: SignedRun, field: str, problem: str
) -> None:
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    attempt = signed_run.start_evaluation("c0001", "gate", 2)
    done = signed_run.finished("c0001", "gate", attempt, {"g1": 1.0, "g2": 1.0})
    signed_run.certify(done, binding=rebound(signed_run.binding, **{field: "x" * 64}))
    c = signed_run.state.candidates["c0001"]
    assert c.score("gate") is None
    assert signed_run.state.problems == [
        f"event {signed_run.events[-1].seq} (c0001/gate#1): certificate rejected: {problem}"
    ]


def test_a_certificate_of_another_candidate_commit_or_evaluation_is_refused(
    signed_run: SignedRun,
) -> None:
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    signed_run.child("c0002", gate=None)
    # c0001's valid certificate replayed as c0002's evaluation
    first = signed_run.start_evaluation("c0001", "train", 1)
    record = signed_run.certify(signed_run.finished("c0001", "train", first, {"t1": 1.0}))
    second = signed_run.start_evaluation("c0002", "train", 1)
    signed_run.emit(
        E.EvaluationCertified(
            id="c0002", split="train", attempt=second, envelope=record.data["envelope"]
        )
    )
    # a record of the right candidate but another tree
    other_tree = replace(signed_run.finished("c0002", "gate", 1, {"g1": 1.0}), tree="f" * 40)
    signed_run.start_evaluation("c0002", "gate", 1)
    signed_run.certify(other_tree)
    # a certificate for an evaluation that never started
    signed_run.certify(signed_run.finished("c0002", "gate", 7, {"g1": 1.0}))
    problems = [p.split(": ", 1)[1] for p in signed_run.state.problems]
    assert problems == [
        "certificate rejected: bound to candidate c0001",
        "certificate rejected: bound to another commit",
        "certificate for an evaluation that never started",
    ]
    c2 = signed_run.state.candidates["c0002"]
    assert c2.score("train") is None and c2.score("gate") is None
    assert signed_run.state.candidates["c0001"].score("train") == 1.0


def test_an_edited_certificate_is_refused(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    attempt = signed_run.start_evaluation("c0001", "gate", 1)
    done = signed_run.finished("c0001", "gate", attempt, {"g1": 0.0})
    envelope = certify(done, signed_run.binding, signed_run.signer).envelope
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["score"] = 1.0
    forged = {**envelope, "payload": base64.b64encode(canonical_json(statement)).decode()}
    signed_run.emit(
        E.EvaluationCertified(id="c0001", split="gate", attempt=attempt, envelope=forged)
    )
    assert signed_run.state.candidates["c0001"].score("gate") is None
    assert "certificate rejected" in signed_run.state.problems[0]


def test_the_champion_is_the_best_admitted_gate_score_and_the_earliest_on_a_tie(
    signed_run: SignedRun,
) -> None:
    signed_run.seed(gate=0.0)
    signed_run.child("c0001", gate=0.5)
    signed_run.child("c0002", gate=0.75)
    signed_run.child("c0003", gate=0.75)
    signed_run.child("c0004", gate=1.0, admit=False)
    st = signed_run.state
    assert st.champion().id == "c0002"
    assert [c.id for c in st.ranked()] == ["c0002", "c0003", "c0001", SEED]
    assert [c.id for c in st.admitted()] == [SEED, "c0001", "c0002", "c0003"]


def test_a_failed_attempt_waits_and_a_retry_certifies(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    attempt = signed_run.start_evaluation("c0001", "train", 1)
    signed_run.emit(E.EvaluationFailed(id="c0001", split="train", attempt=attempt, error="boom"))
    c = signed_run.state.candidates["c0001"]
    assert c.state == "failed" and c.latest("train").error == "boom"
    signed_run.evaluate("c0001", "train", {"t1": 1.0})
    signed_run.evaluate("c0001", "gate", {"g1": 1.0})
    assert c.state == "certified" and [a.attempt for a in c.attempts["train"]] == [1, 2]


def test_rejected_and_abandoned_children_leave_the_indexes(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    signed_run.propose("c0002", SEED, 1)
    assert tree_of("c0001") in signed_run.state.tree_holders
    signed_run.emit(E.CandidateRejected(id="c0001", stage="novelty", reasons=["seen"]))
    signed_run.emit(E.CandidateAbandoned(id="c0002", reason="the mutation did not finish"))
    st = signed_run.state
    assert (st.candidates["c0001"].state, st.candidates["c0002"].state) == (
        "rejected",
        "abandoned",
    )
    assert "c0001" not in st.active and "c0002" not in st.active
    assert tree_of("c0001") not in st.tree_holders
    assert [c.id for c in st.pending()] == []


def test_the_counts_the_budget_reads(signed_run: SignedRun) -> None:
    """Evaluations and task runs from evaluation_started and tasks_run; tokens and cost from
    the evaluation's usage and the gateway's model_call, never an operator's own report."""
    signed_run.seed()
    signed_run.child("c0001", gate=None)
    signed_run.emit(E.TasksRun(id="c0001", purpose="rollout", tasks=4))
    signed_run.start_evaluation("c0001", "train", 3)
    signed_run.emit(E.UsageSpent(id="c0001", slot="evaluate", tokens=100, cost=0.5))
    signed_run.emit(E.UsageSpent(id="c0001", slot="mutate", tokens=10**6, cost=99.0))
    signed_run.emit(
        E.ModelCall(seq=1, candidate="c0001", slot="mutate", prompt_tokens=7, completion_tokens=3)
    )
    st = signed_run.state
    assert (st.evaluations, st.task_runs) == (3 + 1, 3 + 4 + 3)
    assert (st.tokens, st.cost, st.model_calls) == (100 + 10, 0.5, 1)
    assert st.operator_usage == {"c0001": (10, 0.0)}
    assert st.candidates["c0001"].uncertified_runs == 4


def test_an_unknown_or_malformed_event_stops_the_fold(signed_run: SignedRun) -> None:
    signed_run.seed()
    with pytest.raises(ArchiveCorrupt, match="unknown event type 'forged'"):
        signed_run.state.apply(Event(99, "forged", {}, 0.0, "", ""))
    with pytest.raises(ArchiveCorrupt, match=r"candidate_gated\) is malformed"):
        signed_run.state.apply(Event(99, "candidate_gated", {"id": SEED}, 0.0, "", ""))
    with pytest.raises(ArchiveCorrupt, match="is malformed"):  # a candidate never proposed
        signed_run.state.apply(
            Event(99, "candidate_mutated", {"id": "c9", "commit": "a", "tree": "b"}, 0.0, "", "")
        )


def test_folding_the_log_again_gives_the_same_state(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.child("c0001", gate=0.5)
    signed_run.child("c0002", gate=None)
    signed_run.start_evaluation("c0002", "train", 1)
    again = fold(read_events(signed_run.archive.run_dir).events, signed_run.signer.public)
    ours = signed_run.state
    assert {c: x.state for c, x in again.candidates.items()} == {
        c: x.state for c, x in ours.candidates.items()
    }
    assert again.champion().id == ours.champion().id == "c0001"
    assert (again.records, again.task_runs, again.active.keys()) == (
        ours.records,
        ours.task_runs,
        ours.active.keys(),
    )


# -- the model loop (issue 26): paid and cached apart, outages, the check, cut proposals ---


def _folded(*events: tuple[str, dict[str, object]]) -> RunState:
    st = RunState(verifier=None)  # type: ignore[arg-type]
    for seq, (type_, data) in enumerate(events):
        st.apply(Event(seq=seq, ts=0.0, type=type_, data=data, prev="", hash=""))
    return st


def _call(seq: int, status: int = 200, **more: object) -> tuple[str, dict[str, object]]:
    data = {"seq": seq, "model": "proposer", "status": status, "slot": "mutate", **more}
    return ("model_call", data)


def _down(seq: int, status: int = 502) -> tuple[str, dict[str, object]]:
    return _call(seq, status, code="upstream", error=f"connection refused ({seq})")


def test_calls_served_from_the_ledger_are_counted_apart_from_paid_ones() -> None:
    st = _folded(
        _call(1, prompt_tokens=10, completion_tokens=5, cost_usd=0.01),
        _call(2, cached=True),
        _call(3, cached=True),
    )
    assert (st.model_calls, st.model_cached, st.tokens) == (3, 2, 15)
    assert st.models_by_slot["mutate"]["cached_calls"] == 2


def test_consecutive_infrastructure_failures_of_one_model_become_an_outage() -> None:
    st = _folded(_down(1), _down(2))
    assert st.model_outage is None
    st = _folded(_down(1), _down(2), _down(3, status=401))
    assert st.model_outage == {"model": "proposer", "calls": 3, "error": "connection refused (3)"}


def test_a_paid_answer_between_failures_resets_the_streak() -> None:
    st = _folded(_down(1), _down(2), _call(3, prompt_tokens=1), _down(4), _down(5))
    assert st.model_outage is None


def test_failures_of_the_request_or_the_budget_are_no_outage() -> None:
    bad_request = _call(1, 400, code="upstream", error="bad request")
    budget = _call(2, 429, code="max_cost", error="over")
    st = _folded(bad_request, bad_request, budget, budget, bad_request)
    assert st.model_outage is None


def test_a_new_session_starts_a_new_streak() -> None:
    session = ("session_started", {"resumed": True})
    st = _folded(_down(1), _down(2), _down(3), session)
    assert st.model_outage is None and st.outage_streak == {}


def test_the_models_check_is_metered_apart_from_the_run() -> None:
    row = {"model": "proposer", "tokens": 12, "cost_usd": 0.001, "latency_ms": 3.0}
    st = _folded(("models_checked", {"checks": [row]}), ("models_checked", {"checks": [row]}))
    assert st.model_check == {"calls": 2, "tokens": 24, "cost_usd": pytest.approx(0.002)}
    assert (st.model_calls, st.tokens, st.cost) == (0, 0, 0.0)


def test_a_cut_proposal_whose_calls_were_paid_is_retaken_and_counts_no_child() -> None:
    st = _folded(
        ("candidate_proposed", {"id": "c0000", "parent": None, "generation": 0}),
        ("candidate_proposed", {"id": "c0001", "parent": "c0000", "generation": 1}),
        _call(1, candidate="c0001", prompt_tokens=10, completion_tokens=5),
        ("candidate_abandoned", {"id": "c0001", "reason": "driver died", "cause": "cut"}),
        ("candidate_proposed", {"id": "c0002", "parent": "c0000", "generation": 1}),
        ("candidate_abandoned", {"id": "c0002", "reason": "driver died", "cause": "cut"}),
    )
    assert st.retakes == {"c0001": "c0000"}  # c0002 paid nothing: nothing to retake
    assert st.proposed_in[1] == 0 and st.children() == 0
    retake = {"id": "c0003", "parent": "c0000", "generation": 1, "draws": "c0001"}
    st.apply(Event(seq=9, ts=0.0, type="candidate_proposed", data=retake, prev="", hash=""))
    assert st.retakes == {} and st.candidates["c0003"].draws == "c0001"


def test_a_model_outage_abandons_the_child_which_counts_as_no_child_and_is_not_retaken() -> None:
    st = _folded(
        ("candidate_proposed", {"id": "c0000", "parent": None, "generation": 0}),
        ("candidate_proposed", {"id": "c0001", "parent": "c0000", "generation": 1}),
        ("candidate_abandoned", {"id": "c0001", "reason": "x", "cause": "model_outage"}),
    )
    c = st.candidates["c0001"]
    assert (c.state, c.abandoned_cause, st.retakes, st.children()) == (
        "abandoned",
        "model_outage",
        {},
        0,
    )
    assert st.proposed_in[1] == 0  # the generation gets another child in its place
