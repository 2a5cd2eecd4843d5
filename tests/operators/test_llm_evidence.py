"""The llm_evidence operator against the scripted stub: a change manifest."""

from __future__ import annotations

import json
import random

from rsiframe.gateway.stub import Answer
from rsiframe.operators.llm_evidence import LlmEvidence, LlmEvidenceConfig
from tests.support.llmops import PARENT, ROLLOUT, Models, scripted

MANIFEST = {
    "summary": "mean divides by n-1",
    "causes": ["off by one"],
    "edits": [{"change": "divide by n", "fixes": ["t1", "ghost"]}],
    "at_risk": ["t2"],
}


@scripted(Answer(content="I think it is broken."), Answer(content=json.dumps(MANIFEST)))
def test_llm_evidence_builds_a_change_manifest(models: Models) -> None:
    from rsiframe.api import AnalyzeContext

    ctx = AnalyzeContext(None, random.Random(0), 1, PARENT, ROLLOUT)  # type: ignore[arg-type]
    a = LlmEvidence(LlmEvidenceConfig(model="proposer")).analyze(ctx)
    assert a.summary == "mean divides by n-1"
    manifest = a.details["manifest"]
    assert manifest["edits"] == [{"change": "divide by n", "fixes": ["t1"]}]  # ghost dropped
    assert manifest["at_risk"] == ["t2"]
    assert "AssertionError in mean" in models.stub.requests[0]["messages"][0]["content"]
