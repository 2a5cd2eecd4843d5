"""The notes record operator."""

from __future__ import annotations

import random

from rsiframe.api import (
    GateDecision,
    NoConfig,
    RecordContext,
)
from rsiframe.operators.record import NotesRecord
from tests.support.runview import FakeRun, cand


def test_notes_record_deltas() -> None:
    run = FakeRun([cand("p"), cand("k", "p")], {"p": 0.25, "k": 0.5}, train={"p": 0.5, "k": 0.25})
    notes = (
        NotesRecord(NoConfig())
        .record(
            RecordContext(
                run,
                random.Random(0),
                1,
                cand("k", "p", description="d"),
                cand("p"),
                GateDecision(admit=True, reason="why"),
                [{"kind": "modified", "path": "a"}],
            )
        )
        .notes
    )
    assert notes == {
        "description": "d",
        "changed_paths": ["a"],
        "decision": "why",
        "parent": "p",
        "train_delta": -0.25,
        "gate_delta": 0.25,
    }
