"""analyze ``llm_evidence`` (AHE-style): failing train trajectories distilled by a model
into a change manifest: suspected causes, proposed edits with the task ids each should
fix, and the tasks at risk. The manifest goes to mutate in ``Analysis.details``.

The next generation checks the manifest's predictions against the child's certified
train results (:mod:`rsiframe.operators.ahe`: select ``ahe`` reverts a change whose
predicted fixes did not hold, reflect ``ahe_lessons`` says why); the engine records the
analysis with the child (``analysis_done``), so ``CandidateView.analysis`` finds it.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rsiframe import llm
from rsiframe.api import Analysis, AnalyzeContext, AnalyzeOperator
from rsiframe.operators.llmprompt import (
    ContextLimits,
    ModelOperatorConfig,
    Unparsed,
    ask_until_parsed,
    failures,
)

JSON_OBJECT = re.compile(r"\{.*\}", re.S)


class ProposedEdit(BaseModel):
    model_config = ConfigDict(extra="ignore")
    change: str
    fixes: list[str] = Field(default_factory=list)


class Manifest(BaseModel):
    """The change manifest an analysis hands to mutate."""

    model_config = ConfigDict(extra="ignore")
    summary: str = ""
    causes: list[str] = Field(default_factory=list)
    edits: list[ProposedEdit] = Field(default_factory=list)
    at_risk: list[str] = Field(default_factory=list)


def parse_manifest(text: str, known_tasks: set[str]) -> Manifest:
    """The first JSON object in the answer, validated; task ids not in the rollout dropped."""
    match = JSON_OBJECT.search(text)
    if match is None:
        raise ValueError("the answer holds no JSON object")
    try:
        m = Manifest.model_validate(json.loads(match.group(0)))
    except (ValueError, ValidationError) as exc:
        raise ValueError(f"the answer is not a change manifest: {exc}") from exc
    for e in m.edits:
        e.fixes = [t for t in e.fixes if t in known_tasks]
    m.at_risk = [t for t in m.at_risk if t in known_tasks]
    return m


class LlmEvidenceConfig(ModelOperatorConfig, ContextLimits):
    retries: int = Field(1, ge=0, description="times an unparseable answer is asked again")


class LlmEvidence(AnalyzeOperator):
    """Asks a declared model for a change manifest from the failing train trajectories."""

    name = "llm_evidence"
    Config = LlmEvidenceConfig
    config: LlmEvidenceConfig

    def analyze(self, ctx: AnalyzeContext) -> Analysis:
        cfg = self.config
        rows = ctx.rollout.trajectories
        fails = failures(rows, cfg)
        passing = [str(t.get("task")) for t in rows if (t.get("reward") or 0.0) >= 1.0]
        solved = len(passing)
        prompt = cfg.render(
            "llm_evidence.md.j2",
            failures=fails,
            passing=passing,
            train={"solved": solved, "total": len(rows)},
        )
        known = {str(t.get("task")) for t in rows}
        try:
            manifest = ask_until_parsed(
                cfg, prompt, lambda text: parse_manifest(text, known), retries=cfg.retries,
                again="Answer with the JSON object only.",
            )  # fmt: skip
        except Unparsed as exc:
            raise llm.ModelError(f"model {cfg.model!r} gave no change manifest: {exc}") from exc
        summary = manifest.summary or f"{len(fails)} failing train tasks analysed"
        return Analysis(
            summary=summary,
            details={
                "manifest": manifest.model_dump(mode="json"),
                "failed": [f["task"] for f in fails],
                "model": cfg.model,
            },
        )
