"""The score plot's series: train and gate per candidate in proposal order, the best
admitted gate so far, and where the champion is."""

from __future__ import annotations

from rsiframe.viewer.source import row_of
from rsiframe.viewer.widgets.score_plot import series_of
from tests.support.runlog import SignedRun


def test_the_best_line_follows_admitted_children_only(signed_run: SignedRun) -> None:
    signed_run.seed(gate=0.25)
    signed_run.child("c0001", gate=0.75, admit=False)  # declined: not on the best line
    signed_run.child("c0002", gate=0.5)
    signed_run.child("c0003", gate=None)
    st = signed_run.state
    s = series_of([row_of(c) for c in st.candidates.values()], st.champion().id)
    assert s.ids == ["c0000", "c0001", "c0002", "c0003"]
    assert s.gate == [0.25, 0.75, 0.5, None]
    assert s.best == [0.25, 0.25, 0.5, 0.5]
    assert s.champion == 2
