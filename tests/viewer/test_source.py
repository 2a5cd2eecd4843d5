"""rsiframe.viewer.source: a run read as it grows lists the candidates in flight; each
candidate's row, badge and stage."""

from __future__ import annotations

from rsiframe.archive import events as E
from rsiframe.viewer.source import badge, in_flight, row_of
from tests.support.mini import Mini, run_named
from tests.support.runlog import SEED, SignedRun


def test_the_viewer_lists_candidates_in_flight(mini: Mini) -> None:
    from rsiframe.archive.loader import load_run
    from rsiframe.archive.state import fold
    from rsiframe.viewer.source import in_flight

    out = run_named(mini, "done", "concurrency.candidates=2", "budget.max_generations=1")
    loaded = load_run(out)
    evs = loaded.events
    cut = next(
        i for i, e in enumerate(evs) if e.type == "task_finished" and e.data["id"] != "c0000"
    )
    stages = dict(in_flight(fold(evs[:cut], loaded.verifier)))
    assert any(s.startswith("evaluating") for s in stages.values()), stages
    assert in_flight(loaded.state) == []


def test_badges_stages_and_rows_from_a_folded_state(signed_run: SignedRun) -> None:
    """Each candidate as the tables show it (hand-written signed events, no run)."""
    signed_run.seed()
    signed_run.child("c0001", gate=0.5)
    signed_run.propose("c0002", SEED, 1)
    signed_run.child("c0003", gate=None)
    signed_run.start_evaluation("c0003", "train", 1)
    signed_run.child("c0004", gate=None)
    failed = signed_run.start_evaluation("c0004", "train", 1)
    signed_run.emit(
        E.EvaluationFailed(id="c0004", split="train", attempt=failed, error="agent died")
    )
    st = signed_run.state
    assert [badge(st.candidates[c]) for c in ("c0001", "c0002", "c0003", "c0004")] == [
        "✓",
        "·",
        "…",
        "!",
    ]
    assert in_flight(st) == [("c0002", "mutating"), ("c0003", "evaluating train")]
    row = row_of(st.candidates["c0004"])
    assert (row.state, row.decision, row.badge, row.train) == ("failed", "agent died", "!", None)
    assert row_of(st.candidates["c0001"]).gate == 0.5
