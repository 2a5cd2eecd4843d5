"""rsiframe.operators.llmprompt: what a model-driven mutation is shown (the candidate-carried
instructions of HyperAgents)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rsiframe.api import (
    MutateContext,
    Rollout,
)
from rsiframe.operators.llm_edit import EditRejected, LlmEdit, LlmEditConfig
from rsiframe.operators.llmprompt import mutation_context
from tests.support.modelview import cand


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
