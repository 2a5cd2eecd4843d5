"""AHE's change attribution (select ``ahe``, reflect ``ahe_lessons``).

AHE's evolve agent makes its change(s) and **declares** what each should do: per change,
the train tasks it should fix (``predicted_fixes``) and the tasks it may break
(``risk_tasks``). ``llm_edit`` with ``declare: true`` asks for that manifest with the edit
and returns it in ``Mutation.details["manifest"]``. Once the child's train results are
certified, :func:`attribution` judges each declared change against them with AHE's
verdicts: EFFECTIVE (every predicted fix held, no risk task broken), PARTIALLY_EFFECTIVE
(some held), INEFFECTIVE (none held), HARMFUL (none held, a risk task broke), MIXED (some
held, a risk task broke); regressions no change declared a risk for are counted apart
(unattributed). The report goes to the next mutate (``llm_edit`` ``context: {attribution:
true}``), where the editor decides per change: keep, improve or roll back (restoring the
files from before the change, which the report shows).

``select: ahe`` with ``decide: editor`` (AHE's) continues from the newest judged child,
as AHE's loop does: the decision is the editor's. ``decide: rule`` is the automatic rule
kept as a named ablation (not AHE's): keep a child when at least ``min_held`` of its
declared predicted fixes hold, else select its parent again. A child made without a
declared manifest is judged on the analysis' manifest (``llm_evidence``, the legacy
path), whole.

Source: Agentic Harness Engineering (AHE), change manifest and change attribution.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

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
VERDICTS = ("EFFECTIVE", "PARTIALLY_EFFECTIVE", "INEFFECTIVE", "HARMFUL", "MIXED")


@dataclass(frozen=True)
class ChangeVerdict:
    """One declared change judged on the child's certified train results."""

    change: str
    files: tuple[str, ...]
    predicted: tuple[str, ...]
    held: tuple[str, ...]
    missed: tuple[str, ...]
    risks_broken: tuple[str, ...]
    verdict: str

    def line(self) -> str:
        what = f"{self.verdict}: {self.change!r} fixed {len(self.held)}/{len(self.predicted)}"
        if self.missed:
            what += f" (still failing: {', '.join(self.missed)})"
        if self.risks_broken:
            what += f"; risk realised: {', '.join(self.risks_broken)}"
        return what


@dataclass(frozen=True)
class Verdict:
    """What a child's certified train results say about the changes it declared."""

    child: str
    parent: str
    changes: tuple[ChangeVerdict, ...]
    regressions: tuple[str, ...]  # every pass -> fail
    unattributed: tuple[str, ...]  # regressions no change declared a risk for
    score: float
    parent_score: float
    kept: bool  # the automatic rule's decision (``decide: rule``)

    @property
    def predicted(self) -> tuple[str, ...]:
        return tuple(sorted({t for v in self.changes for t in v.predicted}))

    @property
    def held(self) -> tuple[str, ...]:
        return tuple(sorted({t for v in self.changes for t in v.held}))

    @property
    def missed(self) -> tuple[str, ...]:
        return tuple(sorted({t for v in self.changes for t in v.missed}))

    def why(self) -> str:
        """One line: the rule's keep or revert, and the evidence."""
        if not self.predicted:
            what = f"no testable prediction; train {self.parent_score:.3f} -> {self.score:.3f}"
        else:
            what = f"predicted fixes held {len(self.held)}/{len(self.predicted)}"
            if self.missed:
                what += f" (still failing: {', '.join(self.missed)})"
        if self.regressions:
            what += f"; regressions: {', '.join(self.regressions)}"
        if self.kept:
            return f"kept {self.child}: {what}"
        return f"reverted {self.child}: {what}; its parent {self.parent} is selected again"

    def report(self) -> str:
        """AHE's change-attribution report, for the editor's next decision."""
        lines = [
            f"Change attribution for {self.child} (train {self.parent_score:.3f} -> "
            f"{self.score:.3f}):"
        ]
        lines += [f"- change {i}: {v.line()}" for i, v in enumerate(self.changes, start=1)]
        if self.unattributed:
            lines.append(f"- unattributed regressions: {', '.join(self.unattributed)}")
        return "\n".join(lines)


def _artifact_json(run: RunView, digest: str | None) -> dict[str, Any]:
    if digest is None:
        return {}
    try:
        data = json.loads(run.artifact(digest))
    except (KeyError, ValueError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def manifest(run: RunView, c: CandidateView) -> dict | None:
    """The change manifest of the analysis ``c`` was made from (None: it had none)."""
    m = (_artifact_json(run, c.analysis).get("details") or {}).get("manifest")
    return m if isinstance(m, dict) else None


def declared_changes(run: RunView, c: CandidateView) -> list[dict[str, Any]] | None:
    """The changes ``c``'s editor declared with its edit (``Mutation.details.manifest``);
    else the analysis manifest's edits (legacy: predicted before the edit); None: neither."""
    m = (_artifact_json(run, c.mutation).get("details") or {}).get("manifest")
    if isinstance(m, dict) and isinstance(m.get("changes"), list):
        return [ch for ch in m["changes"] if isinstance(ch, dict)]
    legacy = manifest(run, c)
    if legacy is None:
        return None
    at_risk = legacy.get("at_risk") or []
    return [
        {
            "change": e.get("change", ""),
            "predicted_fixes": e.get("fixes") or [],
            "risk_tasks": at_risk,
        }
        for e in legacy.get("edits") or []
        if isinstance(e, dict)
    ]


def _verdict(held: list[str], predicted: list[str], broken: list[str]) -> str:
    if broken:
        return "MIXED" if held else "HARMFUL"
    if predicted and len(held) == len(predicted):
        return "EFFECTIVE"
    return "PARTIALLY_EFFECTIVE" if held else "INEFFECTIVE"


def judge_change(
    change: dict[str, Any], mine: dict[str, float], base: dict[str, float]
) -> ChangeVerdict:
    predicted = sorted({str(t) for t in change.get("predicted_fixes") or [] if str(t) in mine})
    risks = {str(t) for t in change.get("risk_tasks") or []}
    held = [t for t in predicted if mine[t] >= SOLVED]
    broken = sorted(t for t in risks if t in mine and mine[t] < SOLVED <= base.get(t, 0.0))
    return ChangeVerdict(
        str(change.get("change", ""))[:200],
        tuple(str(f) for f in change.get("files") or []),
        tuple(predicted),
        tuple(held),
        tuple(t for t in predicted if t not in held),
        tuple(broken),
        _verdict(held, predicted, broken),
    )


def judge(run: RunView, c: CandidateView, min_held: float = 1.0) -> Verdict | None:
    """The verdict on ``c``'s declared changes, once ``c`` and its parent have train results."""
    changes = declared_changes(run, c)
    if changes is None or c.parent is None:
        return None
    mine, base = run.rewards(c.id, "train"), run.rewards(c.parent, "train")
    if not mine or base is None:
        return None
    judged = tuple(judge_change(ch, mine, base) for ch in changes)
    regressions = tuple(sorted(t for t, r in mine.items() if r < SOLVED <= base.get(t, 0.0)))
    risked = {t for v in judged for t in v.risks_broken}
    score = sum(mine.values()) / len(mine)
    parent_score = sum(base.values()) / len(base) if base else 0.0
    predicted = {t for v in judged for t in v.predicted}
    held = {t for v in judged for t in v.held}
    # the ablation's rule: a testable prediction decides; without one, the train score does
    kept = len(held) >= min_held * len(predicted) if predicted else score > parent_score
    unattributed = tuple(t for t in regressions if t not in risked)
    return Verdict(c.id, c.parent, judged, regressions, unattributed, score, parent_score, kept)


def attribution_report(run: RunView, c: CandidateView, max_file_bytes: int = 4000) -> str | None:
    """``c``'s change-attribution report, with each change's files as they were before it
    (what a rollback restores); None before ``c`` is judged."""
    v = judge(run, c)
    if v is None:
        return None
    parts = [v.report()]
    for i, ch in enumerate(v.changes, start=1):
        for path in ch.files[:4]:
            try:
                before = run.read_file(v.parent, path)[:max_file_bytes].decode(errors="replace")
            except (KeyError, OSError, ValueError):
                before = "(did not exist)"
            parts.append(
                f"change {i}: {path} before it (restore this to roll back):\n```\n{before}\n```"
            )
    return "\n".join(parts)


class AheConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decide: Literal["editor", "rule"] = Field(
        "editor",
        description="editor: continue from the newest judged child, the editor keeps, "
        "improves or rolls back each change from the attribution report (AHE's); rule: "
        "keep or revert automatically on min_held (an ablation, not AHE's)",
    )
    min_held: float = Field(
        1.0, ge=0, le=1, description="decide: rule: share of the predicted fixes that must hold"
    )


class AheSelect(SelectOperator):
    """AHE: the newest judged child (the editor decides per change next); under ``decide:
    rule``, its best kept child, else its parent (the change reverted)."""

    name = "ahe"
    deterministic = True
    Config = AheConfig
    config: AheConfig

    def select(self, ctx: SelectContext) -> Selection:
        run = ctx.run
        judged = [
            (c, v) for c in run.admitted() if (v := judge(run, c, self.config.min_held)) is not None
        ]
        if judged:
            newest = max(c.generation for c, _ in judged)
            batch = [(c, v) for c, v in judged if c.generation == newest]
            if self.config.decide == "editor":
                v = max((v for _, v in batch), key=lambda v: v.score)
                verdicts = ", ".join(ch.verdict for ch in v.changes) or "no declared change"
                return Selection(
                    parent=v.child,
                    reason=f"newest judged {v.child} ({verdicts}): the editor decides per change",
                )
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
    """AHE's evolution history: per judged child of the generation, each change's verdict
    (and the rule's keep or revert)."""

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
                lines += [f"  {ch.line()}" for ch in v.changes]
        return Reflection(lessons="\n".join(lines[-self.config.max_lines :]) + "\n")
