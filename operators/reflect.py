"""reflect ``lessons``: after each generation, append what worked to a lessons file.

The lessons text is handed to the next mutate (``MutateContext.lessons``; the
``script`` mutator gets it as ``RSI_LESSONS_FILE``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import ReflectContext, Reflection, ReflectOperator


class LessonsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_lines: int = Field(60, ge=1, description="the lessons file keeps this many newest lines")


class Lessons(ReflectOperator):
    """One line per child of the generation: kept or not, and by how much."""

    name = "lessons"
    deterministic = True
    Config = LessonsConfig
    config: LessonsConfig

    def reflect(self, ctx: ReflectContext) -> Reflection:
        lines = ctx.previous.splitlines()
        for c in ctx.members:
            mine = ctx.run.score(c.id, "gate")
            base = ctx.run.score(c.parent, "gate") if c.parent else None
            delta = (
                f" ({mine - base:+.3f} on gate)" if mine is not None and base is not None else ""
            )
            verdict = {"admitted": "kept", "declined": "no better"}.get(c.state, c.state)
            lines.append(f"g{ctx.generation} {c.id} [{verdict}]{delta}: {c.description}")
        return Reflection(lessons="\n".join(lines[-self.config.max_lines :]) + "\n")
