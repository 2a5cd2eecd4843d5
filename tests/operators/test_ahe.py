"""AHE's policies on synthetic run views: keep or revert on the manifest's predictions."""

from __future__ import annotations

import random

from rsiframe.api import (
    ReflectContext,
)
from rsiframe.operators.ahe import AheConfig, AheLessons, AheLessonsConfig, AheSelect, judge
from tests.support.modelview import Run, cand, sctx

PARENT = {"t1": 0.0, "t2": 0.0, "t3": 1.0, "t4": 1.0}


FIXES_T1_T2 = {"edits": [{"change": "moms branching", "fixes": ["t1", "t2"]}], "at_risk": []}


def test_a_child_whose_predicted_fixes_held_is_kept() -> None:
    run = Run(
        [cand("c0", None, 0), cand("c1", "c0", 1, "a1")],
        train={"c0": PARENT, "c1": {"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 0.0}},
        manifests={"a1": FIXES_T1_T2},
    )
    v = judge(run, run.candidates()[1])  # type: ignore[arg-type]
    assert v is not None and v.kept
    assert (v.held, v.missed, v.regressions) == (("t1", "t2"), (), ("t4",))
    sel = AheSelect(AheConfig()).select(sctx(run))
    assert sel.parent == "c1"
    assert sel.reason == "kept c1: predicted fixes held 2/2; regressions: t4"


def test_a_child_whose_predicted_fixes_did_not_hold_is_reverted_and_the_lesson_says_why() -> None:
    c1 = cand("c1", "c0", 1, "a1")
    run = Run(
        [cand("c0", None, 0), c1],
        # a better score, but not by the fixes it predicted: reverted all the same
        train={"c0": PARENT, "c1": {"t1": 1.0, "t2": 0.0, "t3": 1.0, "t4": 1.0}},
        manifests={"a1": FIXES_T1_T2},
    )
    sel = AheSelect(AheConfig()).select(sctx(run))
    assert sel.parent == "c0"
    assert sel.reason == (
        "reverted c1: predicted fixes held 1/2 (still failing: t2); its parent c0 is selected again"
    )
    ctx = ReflectContext(
        run=run,  # type: ignore[arg-type]
        rng=random.Random(0),
        generation=1,
        previous="old lesson\n",
        members=[c1],
    )
    lessons = AheLessons(AheLessonsConfig()).reflect(ctx).lessons
    assert lessons == f"old lesson\ng1 {sel.reason} [change c1]\n"
    # a looser threshold keeps it
    assert AheSelect(AheConfig(min_held=0.5)).select(sctx(run)).parent == "c1"


def test_ahe_judges_the_newest_generation_and_falls_back_to_the_score() -> None:
    cands = [
        cand("c0", None, 0),
        cand("c1", "c0", 1, "a1"),  # kept in generation 1 ...
        cand("c2", "c1", 2, "a2"),  # ... but generation 2's only child is reverted
        cand("c3", "c1", 2, "a3", state="rejected"),  # an edit that was never applied
    ]
    run = Run(
        cands,
        train={
            "c0": PARENT,
            "c1": {"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 1.0},
            "c2": {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 1.0},
        },
        manifests={"a1": FIXES_T1_T2, "a2": {"edits": [{"change": "x", "fixes": ["t3"]}]}},
    )
    sel = AheSelect(AheConfig()).select(sctx(run))
    assert (sel.parent, sel.reason.split(":")[0]) == ("c1", "reverted c2")
    # no manifest anywhere: the best on train; without a testable prediction, the score
    plain = Run([cand("c0", None, 0), cand("c1", "c0", 1)], train={"c0": PARENT, "c1": PARENT})
    assert AheSelect(AheConfig()).select(sctx(plain)).reason.startswith("no verdict yet")
    empty = Run(
        [cand("c0", None, 0), cand("c1", "c0", 1, "a1")],
        train={"c0": PARENT, "c1": PARENT},
        manifests={"a1": {"edits": [{"change": "vague", "fixes": []}]}},
    )
    sel = AheSelect(AheConfig()).select(sctx(empty))
    assert sel.parent == "c0" and "no testable prediction; train 0.500 -> 0.500" in sel.reason
