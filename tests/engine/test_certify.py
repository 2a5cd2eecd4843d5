"""certify is the one place a finished evaluation becomes a signed record."""

from __future__ import annotations

import ast

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe.archive import events as E
from rsiframe.archive.log import Event
from rsiframe.archive.state import RunState
from rsiframe.certs.signing import Signer
from rsiframe.engine.certify import Binding, FinishedEvaluation, certify
from tests.support.paths import REPO

BINDING = Binding("run-1", "r" * 64, "e" * 64, "t" * 64, "bwrap")


def _done(**kw: object) -> FinishedEvaluation:
    base = dict(
        candidate="c0000",
        commit="a" * 40,
        tree="b" * 40,
        parent_commit=None,
        split="train",
        attempt=1,
        rewards={"t1": 1.0, "t2": 0.0},
        errors={"t2": "failed"},
        trajectories={"t1": "d" * 64, "t2": "e" * 64},
        model=None,
        started_at=1.0,
        finished_at=2.0,
    )
    return FinishedEvaluation(**{**base, **kw})  # type: ignore[arg-type]


def _state(signer: Signer) -> RunState:
    st = RunState(verifier=signer.public)
    seq = iter(range(100))
    for ev in (
        E.RunStarted(
            run_id="run-1",
            name="n",
            recipe_digest="r" * 64,
            taskset_fingerprint="t" * 64,
            evaluator_fingerprint="e" * 64,
            isolation="bwrap",
            keyid=signer.keyid,
            framework_version="0",
            seed_commit="a" * 40,
            seed_tree="b" * 40,
        ),
        E.CandidateProposed(id="c0000", parent=None, generation=0),
        E.CandidateMutated(id="c0000", commit="a" * 40, tree="b" * 40),
        E.EvaluationStarted(id="c0000", split="train", attempt=1),
    ):
        st.apply(Event(next(seq), ev.type, E.payload(ev), 0.0, "", ""))
    return st


def test_a_certified_evaluation_is_a_score_when_it_binds() -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    st = _state(signer)
    ev = certify(_done(), BINDING, signer)
    st.apply(Event(9, ev.type, E.payload(ev), 0.0, "", ""))
    assert st.problems == []
    assert st.candidates["c0000"].score("train") == 0.5


def test_a_record_bound_elsewhere_is_refused() -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    st = _state(signer)
    ev = certify(_done(tree="f" * 40), BINDING, signer)
    st.apply(Event(9, ev.type, E.payload(ev), 0.0, "", ""))
    assert st.candidates["c0000"].score("train") is None
    assert "bound to another commit" in st.problems[0]


def test_only_certify_assembles_certificates() -> None:
    for p in sorted((REPO / "rsiframe").rglob("*.py")):
        if p.name in ("certify.py", "records.py"):
            continue
        calls = {
            n.func.id
            for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert not calls & {"EvaluationPredicate", "make_statement"}, p.name
