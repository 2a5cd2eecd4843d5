"""AHE's change attribution on synthetic run views: per declared change verdicts, the
editor's decision (select continues from the newest judged child), the automatic rule as an
ablation, and the attribution report in the next mutate prompt."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from rsiframe.api import (
    CandidateView,
    MutateContext,
    ReflectContext,
    Rollout,
)
from rsiframe.gateway.stub import Answer
from rsiframe.operators.ahe import AheConfig, AheLessons, AheLessonsConfig, AheSelect, judge
from rsiframe.operators.llm_edit import LlmEdit, LlmEditConfig
from tests.support.llmops import Models, scripted
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
    sel = AheSelect(AheConfig(decide="rule")).select(sctx(run))
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
    sel = AheSelect(AheConfig(decide="rule")).select(sctx(run))
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
    assert lessons == (
        f"old lesson\ng1 {sel.reason} [change c1]\n"
        "  PARTIALLY_EFFECTIVE: 'moms branching' fixed 1/2 (still failing: t2)\n"
    )
    # a looser threshold keeps it
    assert AheSelect(AheConfig(decide="rule", min_held=0.5)).select(sctx(run)).parent == "c1"


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
    sel = AheSelect(AheConfig(decide="rule")).select(sctx(run))
    assert (sel.parent, sel.reason.split(":")[0]) == ("c1", "reverted c2")
    # no manifest anywhere: the best on train; without a testable prediction, the score
    plain = Run([cand("c0", None, 0), cand("c1", "c0", 1)], train={"c0": PARENT, "c1": PARENT})
    assert AheSelect(AheConfig()).select(sctx(plain)).reason.startswith("no verdict yet")
    empty = Run(
        [cand("c0", None, 0), cand("c1", "c0", 1, "a1")],
        train={"c0": PARENT, "c1": PARENT},
        manifests={"a1": {"edits": [{"change": "vague", "fixes": []}]}},
    )
    sel = AheSelect(AheConfig(decide="rule")).select(sctx(empty))
    assert sel.parent == "c0" and "no testable prediction; train 0.500 -> 0.500" in sel.reason


def declared(*changes: dict) -> dict:
    """A Mutation result whose details carry the editor's declared manifest."""
    return {"changes": list(changes)}


class DeclaredRun(Run):
    """A Run whose candidates also carry their mutation results (``CandidateView.mutation``)."""

    def __init__(self, cands, train, manifests=None, mutations=None, files=None):  # type: ignore[no-untyped-def]
        super().__init__(cands, train=train, manifests=manifests)
        self._blobs.update(
            {d: json.dumps({"description": "e", "details": {"manifest": m}}).encode()
             for d, m in (mutations or {}).items()}
        )  # fmt: skip
        self._files = files or {}

    def read_file(self, cid: str, path: str) -> bytes:
        return self._files[(cid, path)]


def mcand(cid: str, parent: str, gen: int, analysis: str | None, mutation: str) -> CandidateView:
    return dataclasses.replace(cand(cid, parent, gen, analysis), mutation=mutation)


def test_a_two_change_manifest_child_implementing_one_is_judged_only_on_that_one() -> None:
    """The analyzer proposed two edits (t1, t2); the editor implemented and declared one
    (t1): it is judged on t1 alone, not reverted for t2 (the audit's spurious revert)."""
    two = {"edits": [{"change": "a", "fixes": ["t1"]}, {"change": "b", "fixes": ["t2"]}]}
    c1 = mcand("c1", "c0", 1, "a1", "m1")
    run = DeclaredRun(
        [cand("c0", None, 0), c1],
        train={"c0": PARENT, "c1": {"t1": 1.0, "t2": 0.0, "t3": 1.0, "t4": 1.0}},
        manifests={"a1": two},
        mutations={"m1": declared({"change": "a", "predicted_fixes": ["t1"], "risk_tasks": []})},
    )
    v = judge(run, c1)  # type: ignore[arg-type]
    assert v is not None and v.predicted == ("t1",) and v.kept
    assert [ch.verdict for ch in v.changes] == ["EFFECTIVE"]
    assert AheSelect(AheConfig(decide="rule")).select(sctx(run)).parent == "c1"
    # without the declaration (the legacy path) both edits are held against it: reverted
    legacy = Run(
        [cand("c0", None, 0), cand("c1", "c0", 1, "a1")], train=run._train, manifests={"a1": two}
    )
    assert AheSelect(AheConfig(decide="rule")).select(sctx(legacy)).parent == "c0"


@pytest.mark.parametrize(
    ("child", "verdicts", "unattributed"),
    [
        # both predicted fixes held, but the risk task t3 broke: MIXED, not kept as good
        ({"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 1.0}, ["MIXED", "INEFFECTIVE"], ()),
        ({"t1": 0.0, "t2": 0.0, "t3": 0.0, "t4": 1.0}, ["HARMFUL", "INEFFECTIVE"], ()),
        ({"t1": 1.0, "t2": 0.0, "t3": 1.0, "t4": 1.0}, ["PARTIALLY_EFFECTIVE", "INEFFECTIVE"], ()),
        # t4 broke and no change named it a risk: an unattributed regression
        ({"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 0.0}, ["EFFECTIVE", "INEFFECTIVE"], ("t4",)),
    ],
)
def test_each_declared_change_gets_ahes_verdict(
    child: dict[str, float], verdicts: list[str], unattributed: tuple[str, ...]
) -> None:
    c1 = mcand("c1", "c0", 1, None, "m1")
    run = DeclaredRun(
        [cand("c0", None, 0), c1],
        train={"c0": PARENT, "c1": child},
        mutations={
            "m1": declared(
                {"change": "fix both", "predicted_fixes": ["t1", "t2"], "risk_tasks": ["t3"]},
                {"change": "tidy", "predicted_fixes": [], "risk_tasks": []},
            )
        },
    )
    v = judge(run, c1)  # type: ignore[arg-type]
    assert v is not None
    assert [ch.verdict for ch in v.changes] == verdicts
    assert v.unattributed == unattributed
    if verdicts[0] == "MIXED":
        assert v.changes[0].risks_broken == ("t3",) and "risk realised: t3" in v.report()


def test_the_editor_decides_select_continues_from_the_newest_judged_child() -> None:
    c1 = mcand("c1", "c0", 1, None, "m1")
    run = DeclaredRun(
        [cand("c0", None, 0), c1],
        train={"c0": PARENT, "c1": {"t1": 0.0, "t2": 0.0, "t3": 0.0, "t4": 1.0}},
        mutations={
            "m1": declared({"change": "x", "predicted_fixes": ["t1"], "risk_tasks": ["t3"]})
        },
    )
    sel = AheSelect(AheConfig()).select(sctx(run))  # decide: editor, AHE's
    assert sel.parent == "c1"
    assert sel.reason == "newest judged c1 (HARMFUL): the editor decides per change"
    # the ablation reverts the same child automatically
    assert AheSelect(AheConfig(decide="rule")).select(sctx(run)).parent == "c0"


ANSWER = """Memo the answer.
prog.py
```
<<<<<<< SEARCH
x = 1
=======
x = 2
>>>>>>> REPLACE
```
CHANGE MANIFEST:
```json
{"changes": [{"change": "x to 2", "files": ["prog.py"], "predicted_fixes": ["t2"],
  "risk_tasks": ["t4"], "decision": "roll back change 1 of c1"}]}
```
"""


NO_MANIFEST = (
    "No manifest.\nprog.py\n```\n<<<<<<< SEARCH\nx = 1\n=======\nx = 3\n>>>>>>> REPLACE\n```"
)


@scripted(Answer(content=NO_MANIFEST), Answer(content=ANSWER))
def test_the_next_mutate_prompt_holds_the_attribution_report_and_returns_the_manifest(
    models: Models, tmp_path: Path
) -> None:
    """llm_edit with ``declare``: the parent's attribution report (verdicts, the changed
    file as it was before, to restore) is in the prompt; the declared manifest comes back
    in ``Mutation.details``; an answer without one is fed back to the model."""
    c1 = mcand("c1", "c0", 1, None, "m1")
    run = DeclaredRun(
        [cand("c0", None, 0), c1],
        train={"c0": PARENT, "c1": {"t1": 1.0, "t2": 0.0, "t3": 1.0, "t4": 0.0}},
        mutations={
            "m1": declared(
                {
                    "change": "x to 1",
                    "files": ["prog.py"],
                    "predicted_fixes": ["t1"],
                    "risk_tasks": [],
                }
            )
        },
        files={("c0", "prog.py"): b"x = 0\n"},
    )
    (tmp_path / "prog.py").write_text("x = 1\n")
    ctx = MutateContext(
        run=run,  # type: ignore[arg-type]
        rng=random.Random(0),
        generation=2,
        candidate_id="c2",
        parent=c1,
        workdir=tmp_path,
        rollout=Rollout(trajectories=[]),
        analysis=None,
        lessons="",
        surface_include=("prog.py",),
        surface_exclude=(),
    )
    m = LlmEdit(LlmEditConfig(model="proposer", declare=True)).mutate(ctx)
    report, again = models.prompts()
    assert "Change attribution for c1 (train 0.500 -> 0.500):" in report
    assert "- change 1: EFFECTIVE: 'x to 1' fixed 1/1" in report
    assert "- unattributed regressions: t4" in report
    assert "prog.py before it (restore this to roll back):\n```\nx = 0\n" in report
    assert "CHANGE MANIFEST" in report
    assert "no CHANGE MANIFEST block" in again  # the first answer was fed back
    assert m.details["manifest"]["changes"][0]["decision"] == "roll back change 1 of c1"
    assert m.details["manifest"]["changes"][0]["risk_tasks"] == ["t4"]
    assert (tmp_path / "prog.py").read_text() == "x = 2\n"
