"""rsiframe.operators.llmprompt: what a model-driven mutation is shown (the candidate-carried
instructions of HyperAgents)."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsiframe import llm
from rsiframe.api import CandidateView, MutateContext, Rollout
from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.operators.agent_cli import AgentCliConfig
from rsiframe.operators.llm_edit import EditRejected, LlmEdit, LlmEditConfig
from rsiframe.operators.llmprompt import mutation_context
from rsiframe.recipe.models import ModelSpec
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


# -- the mutation context is the recipe's choice (issue 31, item 2) --------------------


ROWS = [
    {
        "task": "t1",
        "reward": 0.0,
        "instruction": "Fix mean in /app/mean.py.",
        "stdout_tail": "wrote mean.py",
        "verifier_tail": "case 1 failed: got 2.5",
    },
    {
        "task": "t2",
        "reward": 0.0,
        "instruction": "Fix gcd in /app/gcd.py.",
        "stdout_tail": "gave up",
        "verifier_tail": "case 0 failed: got None",
    },
    {
        "task": "t3",
        "reward": 1.0,
        "instruction": "Fix fib in /app/fib.py.",
        "stdout_tail": "done",
        "verifier_tail": "all 5 cases pass",
    },
]


class Scores:
    def score(self, cid: str, split: str) -> float:
        return {"train": 0.33, "gate": 0.25}[split]


def ctx(work: Path, lessons: str = "always test first") -> MutateContext:
    return MutateContext(
        run=Scores(),  # type: ignore[arg-type]
        rng=random.Random(0),
        generation=1,
        candidate_id="c1",
        parent=CandidateView("c0", None, 0, "admitted", "abc", "def", "seed"),
        workdir=work,
        rollout=Rollout(trajectories=ROWS),
        analysis=None,
        lessons=lessons,
        surface_include=("prompt.md",),
        surface_exclude=(),
    )


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[StubLLM]:
    edit = "Be careful.\nprompt.md\n```\nBe careful.\n```"
    s = StubLLM(Script(answers=[Answer(content=edit)]))
    srv = ServerThread(s.app).start()
    spec = ModelSpec.model_validate({"base_url": srv.url, "model": "stub", "retries": 0})
    gw = Gateway({"proposer": spec}, Ledger(tmp_path / "gw"), environ={}).start()
    endpoints = functools.partial(gw.sandbox_endpoint, candidate="c1", slot="mutate")
    try:
        with llm.use(gw.client("mutate:c1", candidate="c1", slot="mutate"), endpoints):
            yield s
    finally:
        gw.stop()
        srv.stop()


def _work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "prompt.md").write_text("Solve it.\n")
    return work


def test_the_default_prompt_shows_feedback_instructions_a_passing_example_no_lessons(
    stub: StubLLM, tmp_path: Path
) -> None:
    LlmEdit(LlmEditConfig(model="proposer")).mutate(ctx(_work(tmp_path)))
    prompt = stub.requests[0]["messages"][-1]["content"]
    for row in ROWS:  # two failing examples and the one passing one, each whole
        assert row["instruction"] in prompt and row["verifier_tail"] in prompt
        assert row["stdout_tail"] in prompt
    assert prompt.index("case 1 failed") < prompt.index("Passing train tasks")
    assert "solved 1 of 3" in prompt
    assert "always test first" not in prompt and "Lessons" not in prompt


def test_each_part_of_the_context_is_the_recipes_choice(tmp_path: Path) -> None:
    work = _work(tmp_path)
    shown: dict[str, Any] = {
        "failing": 1,
        "passing": 0,
        "feedback": False,
        "instruction": False,
        "lessons": True,
        "scores": False,
    }
    cfg = LlmEditConfig(model="proposer", context=shown)  # type: ignore[arg-type]
    c = mutation_context(ctx(work), cfg)
    assert [e["task"] for e in c["examples"]] == ["t1"]
    assert c["failures"][0]["feedback"] == c["failures"][0]["instruction"] == ""
    assert c["failures"][0]["output"] == "wrote mean.py"
    assert c["lessons"] == "always test first" and c["train"] is None and c["scores"] == {}
    default = mutation_context(ctx(work), LlmEditConfig(model="proposer"))
    assert default["scores"] == {"train": 0.33, "gate": 0.25} and default["lessons"] == ""
    # agent_cli takes the same context (its instruction shows the same examples)
    agent = AgentCliConfig(model="proposer", profile="command", command="true")
    text = agent.render("agent_cli.md.j2", **mutation_context(ctx(work), agent))
    assert "case 0 failed: got None" in text and "all 5 cases pass" in text
    assert "always test first" not in text
