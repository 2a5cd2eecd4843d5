"""AHE's keep-or-revert on the change manifest's predictions (select ``ahe``, reflect
``ahe_lessons``).

An ``llm_evidence`` analysis hands mutate a change manifest: proposed edits, each with the
train tasks it should fix, and the tasks at risk. Once the child's train results are
certified, :func:`judge` checks the prediction against them: which predicted fixes held
(the child solves the task), which did not, and which regressions appeared (tasks its
parent solved that it fails). A change whose predicted fixes did not hold (fewer than
``min_held`` of them) is reverted: ``select: ahe`` picks its parent again, and
``reflect: ahe_lessons`` writes a lesson saying why, for the next mutate to read. A change
with no testable prediction is judged by its train score against its parent's.

Source: Agentic Harness Engineering (AHE), evidence-driven edits with a change manifest
whose predictions decide keep or revert.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import (
    CandidateView,
    ReflectContext,
    Reflection,
    ReflectOperator,
    RunView,
    SelectContext,
    Selection,
    SelectOperator,
)

SOLVED = 1.0


@dataclass(frozen=True)
class Verdict:
    """What a child's certified train results say about its manifest's prediction."""

    child: str
    parent: str
    predicted: tuple[str, ...]
    held: tuple[str, ...]
    missed: tuple[str, ...]
    regressions: tuple[str, ...]
    score: float
    parent_score: float
    kept: bool

    def why(self) -> str:
        """One line: kept or reverted, and the evidence."""
        if not self.predicted:
            change = f"train {self.parent_score:.3f} -> {self.score:.3f}"
            what = "no testable prediction; " + change
        else:
            what = f"predicted fixes held {len(self.held)}/{len(self.predicted)}"
            if self.missed:
                what += f" (still failing: {', '.join(self.missed)})"
        if self.regressions:
            what += f"; regressions: {', '.join(self.regressions)}"
        if self.kept:
            return f"kept {self.child}: {what}"
        return f"reverted {self.child}: {what}; its parent {self.parent} is selected again"


def manifest(run: RunView, c: CandidateView) -> dict | None:
    """The change manifest of the analysis ``c`` was made from (None: it had none)."""
    if c.analysis is None:
        return None
    try:
        analysis = json.loads(run.artifact(c.analysis))
    except (KeyError, ValueError, OSError):
        return None
    m = (analysis.get("details") or {}).get("manifest")
    return m if isinstance(m, dict) else None


def judge(run: RunView, c: CandidateView, min_held: float = 1.0) -> Verdict | None:
    """The verdict on ``c``'s manifest, once ``c`` and its parent have train results."""
    m = manifest(run, c)
    if m is None or c.parent is None:
        return None
    mine, base = run.rewards(c.id, "train"), run.rewards(c.parent, "train")
    if not mine or base is None:
        return None
    predicted = sorted({str(t) for e in m.get("edits") or [] for t in e.get("fixes") or []})
    predicted = [t for t in predicted if t in mine]
    held = [t for t in predicted if mine[t] >= SOLVED]
    missed = [t for t in predicted if mine[t] < SOLVED]
    regressions = sorted(t for t, r in mine.items() if r < SOLVED <= base.get(t, 0.0))
    score = sum(mine.values()) / len(mine)
    parent_score = sum(base.values()) / len(base) if base else 0.0
    # a testable prediction decides; without one, the train score does
    kept = len(held) >= min_held * len(predicted) if predicted else score > parent_score
    return Verdict(
        c.id,
        c.parent,
        tuple(predicted),
        tuple(held),
        tuple(missed),
        tuple(regressions),
        score,
        parent_score,
        kept,
    )


class AheConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_held: float = Field(
        1.0, ge=0, le=1, description="share of the predicted fixes that must hold to keep"
    )


class AheSelect(SelectOperator):
    """AHE keep/revert: the newest judged generation's best kept child, else its parent
    (the change is reverted; the reason names the predicted fixes that did not hold)."""

    name = "ahe"
    deterministic = True
    Config = AheConfig
    config: AheConfig

    def select(self, ctx: SelectContext) -> Selection:
        run = ctx.run
        judged = [
            (c, v)
            for c in run.candidates()
            if c.state != "rejected" and (v := judge(run, c, self.config.min_held))
        ]
        if judged:
            newest = max(c.generation for c, _ in judged)
            batch = [(c, v) for c, v in judged if c.generation == newest]
            kept = sorted((v for _, v in batch if v.kept), key=lambda v: -v.score)
            if kept:
                return Selection(parent=kept[0].child, reason=kept[0].why())
            return Selection(parent=batch[-1][1].parent, reason=batch[-1][1].why())
        # nothing judged yet (the seed, or children without a manifest): the best so far
        scored = [(run.score(c.id, "train"), c) for c in run.admitted()]
        rows = [(s, c) for s, c in scored if s is not None]
        if not rows:
            raise ValueError("no admitted candidate with a train score to select from")
        score, pick = max(rows, key=lambda r: r[0])
        return Selection(parent=pick.id, reason=f"no verdict yet: best on train ({score:.3f})")


class AheLessonsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_held: float = Field(1.0, ge=0, le=1, description="as select ahe's (keep both equal)")
    max_lines: int = Field(40, ge=1, description="the lessons keep this many newest lines")


class AheLessons(ReflectOperator):
    """One lesson per judged child of the generation: kept or reverted, and why."""

    name = "ahe_lessons"
    deterministic = True
    Config = AheLessonsConfig
    config: AheLessonsConfig

    def reflect(self, ctx: ReflectContext) -> Reflection:
        lines = ctx.previous.splitlines()
        for c in ctx.members:
            v = judge(ctx.run, c, self.config.min_held)
            if v is not None:
                lines.append(f"g{ctx.generation} {v.why()} [{c.description}]")
        return Reflection(lessons="\n".join(lines[-self.config.max_lines :]) + "\n")
