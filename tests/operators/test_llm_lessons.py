"""The llm_lessons operator against the scripted stub: lessons rewritten."""

from __future__ import annotations

import random

from rsiframe.api import CandidateView, ReflectContext
from rsiframe.gateway.stub import Answer
from rsiframe.operators.llm_lessons import LlmLessons, LlmLessonsConfig
from tests.support.llmops import Models, scripted


class _Scores:
    def score(self, cid: str, split: str) -> float | None:
        return {"c0": 0.5, "c1": 0.75}.get(cid)


@scripted(Answer(content="- dividing by n helped\n\n- keep the prompt short\n"))
def test_llm_lessons_rewrites_the_lessons(models: Models) -> None:
    child = CandidateView("c1", "c0", 1, "admitted", "x", "y", "divide by n")
    ctx = ReflectContext(_Scores(), random.Random(0), 1, "old lesson", [child])  # type: ignore[arg-type]
    r = LlmLessons(LlmLessonsConfig(model="proposer")).reflect(ctx)
    assert r.lessons == "- dividing by n helped\n- keep the prompt short\n"
    prompt = models.stub.requests[0]["messages"][0]["content"]
    assert "c1 [kept] (+0.250 on gate): divide by n" in prompt and "old lesson" in prompt
