"""rsiframe.engine.certify: the one place a finished evaluation becomes a signed record,
and what that record binds."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe import __version__
from rsiframe.archive import events as E
from rsiframe.archive.log import Event
from rsiframe.archive.state import RunState
from rsiframe.certs.records import parse_statement
from rsiframe.certs.signing import BadSignature, Signer
from rsiframe.engine.certify import (
    Binding,
    FinishedEvaluation,
    certified_code,
    certify,
    evaluator_identity,
)
from rsiframe.slots.identity import file_digest
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


def test_the_record_binds_what_the_run_declared_and_what_was_evaluated() -> None:
    signer = Signer(Ed25519PrivateKey.generate())
    code = {"evaluator": {"engine": "local"}, "gate": None}
    binding = Binding("run-1", "r" * 64, "e" * 64, "t" * 64, "bwrap", code, {"harbor": "0.1"})
    done = _done(parent_commit="p" * 40, executor={"kind": "local", "node": "n1"})
    ev = certify(done, binding, signer)
    assert (ev.id, ev.split, ev.attempt) == ("c0000", "train", 1)
    rec = parse_statement(signer.public.open(ev.envelope))
    p = rec.predicate
    assert (rec.commit, rec.tree) == ("a" * 40, "b" * 40)
    assert (p.run_id, p.candidate, p.parent_commit, p.split, p.attempt) == (
        "run-1",
        "c0000",
        "p" * 40,
        "train",
        1,
    )
    assert (p.recipe_digest, p.evaluator_fingerprint, p.taskset_fingerprint, p.isolation) == (
        "r" * 64,
        "e" * 64,
        "t" * 64,
        "bwrap",
    )
    assert p.rewards == {"t1": 1.0, "t2": 0.0} and p.errors == {"t2": "failed"}
    assert p.score == 0.5 and p.trajectories == {"t1": "d" * 64, "t2": "e" * 64}
    assert (p.code, p.evaluator, p.executor) == (code, {"harbor": "0.1"}, done.executor)
    assert p.framework_version == __version__
    assert (p.started_at, p.finished_at) == (1.0, 2.0)


def test_a_record_is_signed_by_the_runs_key_only() -> None:
    signer, other = Signer(Ed25519PrivateKey.generate()), Signer(Ed25519PrivateKey.generate())
    ev = certify(_done(), BINDING, signer)
    with pytest.raises(BadSignature):
        other.public.open(ev.envelope)
    assert certify(_done(rewards={}), BINDING, signer).envelope != ev.envelope


def test_the_evaluators_code_identity_is_its_files_digest(tmp_path: Path) -> None:
    import rsiframe.evaluators.local as local

    identity = evaluator_identity("local")
    assert identity["file"] == str(Path(local.__file__).resolve())
    assert identity["sha256"] == file_digest(identity["file"])
    assert identity["rsiframe"] == __version__
    assert evaluator_identity("no-such-engine")["file"] is None
    lock = tmp_path / "recipe.lock.json"
    lock.write_text(
        json.dumps(
            {
                "resolved": {"evaluator": {"engine": "local"}},
                "operators": {"gate": {"kind": "builtin", "name": "improves_parent"}},
            }
        )
    )
    assert certified_code(lock) == {
        "evaluator": identity,
        "gate": {"kind": "builtin", "name": "improves_parent"},
    }
