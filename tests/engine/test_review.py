"""rsiframe.engine.review: gate, record and reflect after evaluation, each through its
operator; an operator that fails declines, keeps its error as notes, or keeps the lessons.
The state is folded from hand-written signed events (tests/support/runlog.py), no run."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.api import (
    GateContext,
    GateDecision,
    GateOperator,
    NoConfig,
    Notes,
    RecordContext,
    RecordOperator,
    ReflectContext,
    Reflection,
    ReflectOperator,
)
from rsiframe.archive import events as E
from rsiframe.engine.review import gate, record, reflect
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.slots.calls import OperatorCalls, Progress, Timings
from rsiframe.slots.runview import StateView
from tests.support.runlog import SEED, SignedRun


class Better(GateOperator, RecordOperator, ReflectOperator):
    """Admits a child whose gate score beats its parent's; notes and lessons say so."""

    name = "better"

    def __init__(self, fail: bool = False) -> None:
        super().__init__(NoConfig())
        self.fail = fail

    def gate(self, ctx: GateContext) -> GateDecision:
        if self.fail:
            raise RuntimeError("gate broke")
        mine, theirs = (ctx.run.score(c.id, "gate") for c in (ctx.candidate, ctx.parent))
        return GateDecision(admit=(mine or 0) > (theirs or 0), reason=f"{mine} vs {theirs}")

    def record(self, ctx: RecordContext) -> Notes:
        if self.fail:
            raise RuntimeError("record broke")
        return Notes(notes={"admitted": ctx.decision.admit, "parent": ctx.parent.id})

    def reflect(self, ctx: ReflectContext) -> Reflection:
        if self.fail:
            raise RuntimeError("reflect broke")
        return Reflection(lessons=ctx.previous + f"g{ctx.generation}: {len(ctx.members)}\n")


class NoteLog(Progress):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def _calls(run: SignedRun, tmp_path: Path, fail: bool = False) -> OperatorCalls:
    view = StateView(run.state, CandidateRepo.create(tmp_path / "repo.git"), run.archive.run_dir)
    op = Better(fail)
    ops = {"gate": op, "record": op, "reflect": op}
    return OperatorCalls(ops, {s: "better" for s in ops}, view, 7, Timings(), progress=NoteLog())  # type: ignore[arg-type]


@pytest.fixture
def reviewed(signed_run: SignedRun) -> SignedRun:
    """A seed scoring 0.25 on gate and two certified children: 0.5 and 0.0."""
    signed_run.seed(gate=0.25)
    signed_run.child("c0001", gate=0.5, admit=None)
    signed_run.child("c0002", gate=0.0, admit=None)
    return signed_run


def test_the_seed_is_admitted_as_the_anchor_without_asking_the_gate(
    signed_run: SignedRun, tmp_path: Path
) -> None:
    signed_run.start()
    signed_run.propose(SEED, None, 0)
    calls = _calls(signed_run, tmp_path, fail=True)
    decided = gate(calls, signed_run.state, signed_run.state.candidates[SEED])
    assert decided == E.CandidateGated(id=SEED, admit=True, reason="seed (anchor)")


def test_the_gate_decides_from_verified_scores(reviewed: SignedRun, tmp_path: Path) -> None:
    calls, st = _calls(reviewed, tmp_path), reviewed.state
    assert gate(calls, st, st.candidates["c0001"]) == E.CandidateGated(
        id="c0001", admit=True, reason="0.5 vs 0.25"
    )
    assert gate(calls, st, st.candidates["c0002"]).admit is False


def test_a_gate_that_fails_declines_the_child(reviewed: SignedRun, tmp_path: Path) -> None:
    st = reviewed.state
    decided = gate(_calls(reviewed, tmp_path, fail=True), st, st.candidates["c0001"])
    assert (decided.admit, decided.reason) == (
        False,
        "gate operator failed: RuntimeError: gate broke",
    )


def test_record_keeps_the_operators_notes_or_its_error(reviewed: SignedRun, tmp_path: Path) -> None:
    reviewed.emit(E.CandidateGated(id="c0001", admit=True, reason="better"))
    c = reviewed.state.candidates["c0001"]
    assert record(_calls(reviewed, tmp_path), reviewed.state, c) == E.CandidateRecorded(
        id="c0001", notes={"admitted": True, "parent": SEED}
    )
    failed = record(_calls(reviewed, tmp_path / "b", fail=True), reviewed.state, c)
    assert failed.notes == {"error": "record operator failed: RuntimeError: record broke"}


def test_reflect_stores_the_lessons_or_keeps_the_old_ones(
    reviewed: SignedRun, tmp_path: Path
) -> None:
    put = reviewed.archive.put
    reviewed.emit(reflect(_calls(reviewed, tmp_path), reviewed.state, 1, put))
    assert reviewed.state.reflected[1] == reviewed.state.lessons_digest
    calls = _calls(reviewed, tmp_path / "b", fail=True)
    assert calls.view.lessons == "g1: 2\n"  # two members of generation 1, the seed not one
    kept = reflect(calls, reviewed.state, 2, put)
    assert kept.lessons == reviewed.state.lessons_digest
    assert calls.progress.notes == ["reflect operator failed: RuntimeError: reflect broke"]
