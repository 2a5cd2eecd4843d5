"""The candidate screen's header: id, state, certificate badge, lineage, commit, scores."""

from __future__ import annotations

from rsiframe.archive import events as E
from rsiframe.viewer.widgets.candidate_header import candidate_text
from tests.support.runlog import SEED, SignedRun, commit_of
from tests.support.viewer import text_of


def test_the_champion_and_a_rejected_child(signed_run: SignedRun) -> None:
    signed_run.seed(gate=0.25)
    signed_run.child("c0001", gate=0.5)
    champ = text_of(candidate_text(signed_run.state.candidates["c0001"], champion=True))
    assert "c0001 ★ champion" in champ and "admitted" in champ and "✓" in champ
    assert f"gen 1  parent {SEED}  commit {commit_of('c0001')[:12]}" in champ
    assert "gate 0.500" in champ and "unit" in champ  # the gate's reason
    signed_run.propose("c0002", SEED, 1)
    signed_run.emit(
        E.CandidateRejected(
            id="c0002", stage="guardrail", reasons=["x"], commit="e" * 40, description="edit"
        )
    )
    rejected = text_of(candidate_text(signed_run.state.candidates["c0002"], champion=False))
    assert "★" not in rejected and "rejected" in rejected and "·" in rejected
    assert f"commit {'e' * 12}" in rejected and "\nedit\n" in rejected
