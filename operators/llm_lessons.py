"""reflect ``llm_lessons`` (GEPA-style reflection): a model turns a generation's outcomes
into lessons for the next mutate (template ``prompts/llm_lessons.md.j2``)."""

from __future__ import annotations

from pydantic import Field

from rsiframe.api import ReflectContext, Reflection, ReflectOperator
from rsiframe.operators.llmprompt import ModelOperatorConfig, ask_for_lines


class LlmLessonsConfig(ModelOperatorConfig):
    max_lines: int = Field(40, ge=1, description="the lessons keep at most this many lines")


class LlmLessons(ReflectOperator):
    """Asks a declared model to rewrite the lessons after each generation."""

    name = "llm_lessons"
    Config = LlmLessonsConfig
    config: LlmLessonsConfig

    def reflect(self, ctx: ReflectContext) -> Reflection:
        cfg = self.config
        members = []
        for c in ctx.members:
            mine = ctx.run.score(c.id, "gate")
            base = ctx.run.score(c.parent, "gate") if c.parent else None
            delta = mine - base if mine is not None and base is not None else None
            verdict = {"admitted": "kept", "declined": "no better"}.get(c.state, c.state)
            members.append(
                {"id": c.id, "verdict": verdict, "delta": delta, "description": c.description}
            )
        prompt = cfg.render(
            "llm_lessons.md.j2",
            generation=ctx.generation,
            members=members,
            previous=ctx.previous,
            max_lines=cfg.max_lines,
        )
        return Reflection(lessons=ask_for_lines(cfg, prompt, cfg.max_lines, "no lessons"))
