"""The certificates tab: each attempt, whether its signature verifies and binds, and what
the record says; a rejected certificate says why."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe.certs.signing import Signer
from rsiframe.viewer.widgets.certificates import certificate_group
from tests.support.runlog import RUN_ID, SEED, SignedRun, commit_of
from tests.support.viewer import text_of


def test_a_verified_record_and_a_forged_one(signed_run: SignedRun) -> None:
    signed_run.seed(gate=0.5)
    signed_run.child("c0001", gate=None)
    attempt = signed_run.start_evaluation("c0001", "train", 1)
    forger = Signer(Ed25519PrivateKey.generate())
    signed_run.certify(signed_run.finished("c0001", "train", attempt, {"t1": 1.0}), signer=forger)
    seed = text_of(certificate_group(signed_run.state.candidates[SEED], "key-1"))
    assert seed.count("✓ signature verifies") == 3
    lines = [" ".join(line.split()) for line in seed.splitlines()]
    assert f"subject commit {commit_of(SEED)}" in lines and "signed by key key-1" in lines
    assert "run_id" in seed and RUN_ID in seed and "1 rewarded, 0 with errors" in seed
    child = text_of(certificate_group(signed_run.state.candidates["c0001"], "key-1"))
    assert "train #1  ✗ certificate rejected" in child and "subject commit" not in child


def test_a_candidate_never_evaluated(signed_run: SignedRun) -> None:
    signed_run.seed()
    signed_run.propose("c0001", SEED, 1)
    assert "no evaluations" in text_of(certificate_group(signed_run.state.candidates["c0001"], "k"))
