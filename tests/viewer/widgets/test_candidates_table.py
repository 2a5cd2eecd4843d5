"""The candidates table's filter (words, and ``state:``/``gen:``/``parent:``/``id:`` exact)
and sort keys (unscored last, older first on ties)."""

from __future__ import annotations

from rsiframe.viewer.source import row_of
from rsiframe.viewer.widgets.candidates_table import _key, matches
from tests.support.runlog import SEED, SignedRun


def _rows(signed_run: SignedRun) -> dict:
    signed_run.seed(gate=0.25)
    signed_run.child("c0001", gate=0.5)
    signed_run.child("c0002", gate=0.5, admit=False)
    signed_run.child("c0003", parent="c0001", generation=2, gate=None)
    return {cid: row_of(c) for cid, c in signed_run.state.candidates.items()}


def test_the_filter(signed_run: SignedRun) -> None:
    rows = _rows(signed_run)

    def found(query: str) -> list[str]:
        return [cid for cid, r in rows.items() if matches(r, query)]

    assert found("") == list(rows)
    assert found("state:declined") == ["c0002"]
    assert found("gen:2") == ["c0003"] and found("g2") == ["c0003"]
    assert found(f"parent:{SEED} state:admitted") == ["c0001"]
    assert found("id:c0001") == ["c0001"] and found("nothing-like-this") == []


def test_sorting_puts_unscored_last_and_older_first_on_a_tie(signed_run: SignedRun) -> None:
    rows = _rows(signed_run)
    by_gate = sorted(rows.values(), key=lambda r: _key(r, "gate"), reverse=True)
    assert [r.id for r in by_gate] == ["c0001", "c0002", SEED, "c0003"]
    assert [r.id for r in sorted(rows.values(), key=lambda r: _key(r, "gen"))][-1] == "c0003"
