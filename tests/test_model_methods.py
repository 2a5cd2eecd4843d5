"""The model-driven methods' policies on synthetic run views: AHE's keep/revert on the
manifest's predictions, A-Evolve's rollback, HyperAgents' candidate-carried instructions."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from rsiframe.api import (
    CandidateView,
    MutateContext,
    ReflectContext,
    Rollout,
    SelectContext,
)
from rsiframe.operators.aevolve import Rollback, RollbackConfig
from rsiframe.operators.ahe import AheConfig, AheLessons, AheLessonsConfig, AheSelect, judge
from rsiframe.operators.llm_edit import EditRejected, LlmEdit, LlmEditConfig
from rsiframe.operators.llmprompt import mutation_context


def cand(
    cid: str, parent: str | None, gen: int, analysis: str | None = None, state: str = "admitted"
) -> CandidateView:
    return CandidateView(cid, parent, gen, state, "c" * 40, cid, f"change {cid}", {}, (), analysis)


class Run:
    """A RunView over candidates, train rewards, gate scores and analysis artifacts."""

    lessons = ""

    def __init__(
        self,
        cands: list[CandidateView],
        train: dict[str, dict[str, float]] | None = None,
        gate: dict[str, float] | None = None,
        manifests: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self._c = {c.id: c for c in cands}
        self._train = train or {}
        self._gate = gate or {}
        self._blobs = {
            d: json.dumps({"summary": "s", "details": {"manifest": m}}).encode()
            for d, m in (manifests or {}).items()
        }

    def candidates(self) -> list[CandidateView]:
        return list(self._c.values())

    def admitted(self) -> list[CandidateView]:
        return [c for c in self._c.values() if c.state == "admitted"]

    def score(self, cid: str, split: str) -> float | None:
        if split == "gate":
            return self._gate.get(cid)
        r = self._train.get(cid)
        return sum(r.values()) / len(r) if r else None

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        assert split == "train"
        return self._train.get(cid)

    def artifact(self, digest: str) -> bytes:
        return self._blobs[digest]

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected read: {name}")


def sctx(run: Run) -> SelectContext:
    return SelectContext(run=run, rng=random.Random(0), generation=3)  # type: ignore[arg-type]


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


def chain(scores: list[float]) -> Run:
    """c0 .. cN, each the child of the one before, one per generation."""
    cands = [cand(f"c{i}", f"c{i - 1}" if i else None, i) for i in range(len(scores))]
    return Run(cands, gate={f"c{i}": s for i, s in enumerate(scores)})


@pytest.mark.parametrize(
    ("scores", "patience", "parent", "reason"),
    [
        ([0.1, 0.2, 0.3], 2, "c2", "newest state is the best (0.300)"),
        ([0.1, 0.4, 0.3], 2, "c2", "continue from c2 (gate 0.300; best c1 0.400, 1 of 2"),
        ([0.1, 0.4, 0.3, 0.2], 2, "c1", "rollback to c1 (gate 0.400): 2 generations without"),
        ([0.1, 0.4, 0.3, 0.2], 3, "c3", "continue from c3"),
        ([0.4, 0.4, 0.4], 2, "c0", "rollback to c0"),  # a tie is no improvement
    ],
)
def test_rollback_after_patience_generations_without_improvement(
    scores: list[float], patience: int, parent: str, reason: str
) -> None:
    sel = Rollback(RollbackConfig(patience=patience)).select(sctx(chain(scores)))
    assert sel.parent == parent and sel.reason.startswith(reason), sel.reason


def test_llm_edit_shows_the_candidate_carried_instructions(tmp_path: Path) -> None:
    work = tmp_path / "w"
    (work / "meta").mkdir(parents=True)
    (work / "meta" / "instructions.md").write_text("Prefer moms branching.\n")
    (work / "solver.yaml").write_text("branching: first\n")
    ctx = MutateContext(
        run=None,  # type: ignore[arg-type]
        rng=random.Random(0),
        generation=1,
        candidate_id="c1",
        parent=cand("c0", None, 0),
        workdir=work,
        rollout=Rollout(trajectories=[]),
        analysis=None,
        lessons="",
        surface_include=("solver.yaml", "meta/instructions.md"),
        surface_exclude=(),
    )
    op = LlmEdit(LlmEditConfig(model="m", instructions_file="meta/instructions.md"))
    context = mutation_context(ctx, op.config)
    prompt = op.config.render("llm_edit.md.j2", instructions=op._instructions(ctx), **context)
    assert "Your own instructions, from meta/instructions.md (you may improve them too" in prompt
    assert "Prefer moms branching." in prompt
    missing = LlmEdit(LlmEditConfig(model="m", instructions_file="meta/none.md"))
    with pytest.raises(EditRejected, match=r"instructions_file meta/none\.md: not a regular file"):
        missing._instructions(ctx)
