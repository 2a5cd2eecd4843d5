"""rsiframe.engine.duplicates: which candidate holds each tree; in generational mode the
earlier proposal keeps a tree whatever finishes first. Hand-written events, no run (the
run-level rule, a duplicate never evaluated, is in tests/e2e/test_model_loop.py)."""

from __future__ import annotations

import threading
import time

from rsiframe.archive import events as E
from rsiframe.archive.log import Event
from rsiframe.archive.state import RunState
from rsiframe.engine.duplicates import TreeClaims
from rsiframe.engine.hooks import Lifecycle, Notice


def _state(*events: tuple[str, dict[str, object]]) -> RunState:
    st = RunState(verifier=None)  # type: ignore[arg-type]
    for seq, (type_, data) in enumerate(events):
        st.apply(Event(seq=seq, ts=0.0, type=type_, data=data, prev="", hash=""))
    return st


def test_a_second_claim_of_a_tree_names_its_holder() -> None:
    claims = TreeClaims(_state(), ordered=False)
    assert claims.claim("c0001", "tree-a") is None
    assert claims.claim("c0002", "tree-a") == "c0001"
    assert claims.claim("c0003", "tree-b") is None


def test_trees_held_before_a_resume_are_held_after_it() -> None:
    st = _state(
        ("candidate_proposed", {"id": "c0001", "parent": None, "generation": 1}),
        ("candidate_mutated", {"id": "c0001", "commit": "a" * 40, "tree": "tree-a"}),
        ("candidate_proposed", {"id": "c0002", "parent": None, "generation": 1}),
        (
            "candidate_rejected",
            {"id": "c0002", "stage": "validate", "reasons": ["x"], "tree": "tree-b"},
        ),
    )
    claims = TreeClaims(st, ordered=True)
    assert claims.claim("c0003", "tree-a") == "c0001"  # committed
    assert claims.claim("c0004", "tree-b") == "c0002"  # rejected by validate, after its claim


def test_a_tree_recorded_by_an_event_is_held() -> None:
    claims = TreeClaims(_state(), ordered=False)
    data = E.CandidateMutated(id="c0007", commit="b" * 40, tree="tree-c")
    ev = Event(seq=9, ts=0.0, type=data.type, data=E.payload(data), prev="", hash="")
    claims.on_event(Notice(Lifecycle.EVENT_WRITTEN, ev, data))
    assert claims.claim("c0008", "tree-c") == "c0007"


def test_in_generational_mode_the_earlier_proposal_keeps_the_tree() -> None:
    claims = TreeClaims(_state(), ordered=True)
    claims.opened("c0001", 1)
    claims.opened("c0002", 2)
    got: dict[str, str | None] = {}
    later = threading.Thread(target=lambda: got.update(late=claims.claim("c0002", "tree")))
    later.start()  # c0002 finishes its mutation first, but waits for c0001's claim
    time.sleep(0.3)
    assert later.is_alive() and not got
    assert claims.claim("c0001", "tree") is None
    later.join(5)
    assert got == {"late": "c0001"}


def test_an_earlier_proposal_that_ends_without_a_claim_frees_the_later_one() -> None:
    claims = TreeClaims(_state(), ordered=True)
    claims.opened("c0001", 1)
    claims.opened("c0002", 2)
    got: dict[str, str | None] = {}
    later = threading.Thread(target=lambda: got.update(late=claims.claim("c0002", "tree")))
    later.start()
    time.sleep(0.2)
    claims.closed("c0001")  # its operator failed: it never claims
    later.join(5)
    assert got == {"late": None}


def test_in_steady_mode_the_first_claim_keeps_the_tree() -> None:
    claims = TreeClaims(_state(), ordered=False)
    claims.opened("c0001", 1)
    claims.opened("c0002", 2)
    assert claims.claim("c0002", "tree") is None  # no wait for c0001
    assert claims.claim("c0001", "tree") == "c0002"
