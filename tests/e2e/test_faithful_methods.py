"""The faithful GEPA and DGM recipes end to end on pyfix against the stub model, through the
real gateway (issue 31): GEPA's reflection on the rollout's minibatch and its acceptance on
exactly those tasks; DGM's diagnosis of a failed task and the parent's own agent improving
itself, metered to ``mutate``, with a child stopped at stage 1 archived.

The stub plays every model: the seed agent fixes ``mean`` (so a minibatch holds a passing
example); an agent whose prompt says "Clamp with care." also fixes ``clamp``, so a
reflection or a self-improvement that writes that line into prompt.md is a real
improvement the framework must measure and accept."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsiframe.archive.log import get_artifact
from rsiframe.gateway.stub import Answer, Script, StubLLM, ToolCall
from tests.support.cli import cli, events, status_json
from tests.support.gateway import serving
from tests.support.paths import REPO
from tests.support.pyfix import CLAMP, MEAN

pytestmark = pytest.mark.e2e

MARKER = "Clamp with care."
PROMPT = (
    "You are a careful Python programmer working in the folder /app.\n\n{instruction}\n\n"
    + MARKER
    + "\n"
)
DIAGNOSIS = {
    "log_summarization": "the agent wrote a wrong clamp",
    "potential_improvements": ["a line about clamping in the prompt"],
    "improvement_proposal": "tell the agent to clamp with care",
    "implementation_suggestion": "Add the line 'Clamp with care.' at the end of prompt.md.",
    "problem_description": "The agent gets interval bounds wrong.",
}
SPLIT = """\
tasks:
  split: {{ratios: null, train: [{train}], gate: [pyfix-006], sealed: [pyfix-007]}}
models:
  proposer: {{model: stub, retries: 0}}
"""


def _agent_answers() -> list[Answer]:
    """The seed agent's model: mean always; clamp only under the marker line."""
    return [
        Answer(when="The function `mean`", repeat=True, content=f"```python\n{MEAN}```"),
        Answer(when=MARKER, repeat=True, content=f"```python\n{CLAMP}```"),
    ]


def _stub(first: list[Answer], monkeypatch: pytest.MonkeyPatch) -> Iterator[StubLLM]:
    script = Script(answers=[*first, *_agent_answers()], default=Answer(content="```\npass\n```"))
    with serving(monkeypatch, script) as s:
        yield s


def _run(tmp_path: Path, recipe: str, train: str, *sets: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(f"extends: {REPO / 'recipes' / 'pyfix' / recipe}\n" + SPLIT.format(train=train))
    out = tmp_path / "run"
    args = [a for s in sets for a in ("--set", s)]
    res = cli("run", path, "--out", out, "--quiet", *args)
    assert res.exit_code == 0, res.stderr
    assert cli("verify", out).exit_code == 0
    return out


def _calls(evs: list[dict[str, Any]], slot: str) -> list[dict[str, Any]]:
    return [e["data"] for e in evs if e["type"] == "model_call" and e["data"].get("slot") == slot]


@pytest.fixture
def gepa_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubLLM]:
    reflect = Answer(
        when="An agent system is built from components",
        repeat=True,
        content=f"The agent never clamps right.\n```\n{PROMPT}```\n",
    )
    yield from _stub([reflect], monkeypatch)


def test_gepa_reflects_on_its_minibatch_and_accepts_on_exactly_those_tasks(
    gepa_stub: StubLLM, tmp_path: Path
) -> None:
    out = _run(
        tmp_path,
        "gepa.yaml",
        "pyfix-001, pyfix-002, pyfix-003",
        "slots.mutate.config.components=[prompt.md]",
        "budget.max_generations=2",
    )
    evs = events(out)
    ran = {
        (e["data"]["id"], e["data"]["purpose"]): e["data"]["task_ids"]
        for e in evs
        if e["type"] == "tasks_run"
    }
    rollout = ran[("c0001", "rollout")]
    assert sorted(rollout) == ["pyfix-001", "pyfix-002", "pyfix-003"]
    assert ran[("c0001", "minibatch")] == rollout  # accepted on the reflection's own tasks
    # the reflection saw prompt.md whole and every example, passing and failing, with the
    # verifier's output; no lessons
    reflection = next(r for r in gepa_stub.requests if "built from components" in str(r))
    prompt = reflection["messages"][-1]["content"]
    assert "{instruction}" in prompt and "(reward 1.0)" in prompt and "(reward 0.0)" in prompt
    assert prompt.count("The function `") == 3 and "Lessons" not in prompt
    assert "cases" in prompt or "FAIL" in prompt or "assert" in prompt.lower()
    status = {c["id"]: c for c in status_json(out)["candidates"]}
    assert status["c0001"]["state"] == "admitted"  # 2 of 3 on the minibatch against 1
    assert status["c0001"]["scores"]["train"] == pytest.approx(2 / 3)
    mutation = next(
        e["data"] for e in evs if e["type"] == "candidate_mutated" and e["data"]["id"] == "c0001"
    )
    details = json.loads(get_artifact(out, mutation["mutation"]))["details"]
    assert details["component"] == "prompt.md" and details["minibatch"] == rollout
    assert next(c["candidate"] for c in _calls(evs, "mutate")) == "c0001"  # metered to mutate


@pytest.fixture
def dgm_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubLLM]:
    diagnose = Answer(
        when="find ONE improvement to the agent itself",
        repeat=True,
        content="```json\n" + json.dumps(DIAGNOSIS) + "\n```",
    )
    improve = Answer(
        when="improving your own code",
        repeat=True,
        content="I add the line.",
        tool_calls=[
            ToolCall(name="write_file", arguments={"path": "prompt.md", "content": PROMPT})
        ],
    )
    yield from _stub([diagnose, improve], monkeypatch)


def test_dgm_the_parents_own_agent_improves_itself_and_a_stopped_child_is_archived(
    dgm_stub: StubLLM, tmp_path: Path
) -> None:
    out = _run(
        tmp_path,
        "dgm.yaml",
        "pyfix-001, pyfix-002, pyfix-003, pyfix-004",
        # stage 1: 2 fixed train tasks; nobody reaches 1.01, so every child stops there
        "evaluator.stages=[{split: train, tasks: 2, min_score: 1.01, on_fail: archive},"
        " {split: train}]",
        "budget.max_generations=1",
        "children_per_generation=1",
    )
    evs = events(out)
    # the diagnosis: a model call of analyze; its problem statement is the agent's task
    assert [c["candidate"] for c in _calls(evs, "analyze")] == ["c0001"]
    first = [str(r["messages"][0]["content"]) for r in dgm_stub.requests]
    improve = [m for m in first if m.startswith("You are a coding agent improving your own code")]
    assert improve, "the parent's own agent never ran in --self-improve mode"
    assert "The agent gets interval bounds wrong." in improve[0]
    # the agent's calls went through the gateway, metered to the child's mutate
    mutate_calls = _calls(evs, "mutate")
    assert len(mutate_calls) >= 2 and {c["candidate"] for c in mutate_calls} == {"c0001"}
    status = {c["id"]: c for c in status_json(out)["candidates"]}
    child = status["c0001"]
    assert child["state"] == "admitted" and child["stopped_at"] == "train@1"
    assert child["scores"]["train"] is None  # never paid for the full train split
    mutated = next(
        e["data"] for e in evs if e["type"] == "candidate_mutated" and e["data"]["id"] == "c0001"
    )
    assert [c["path"] for c in mutated["changes"]] == ["prompt.md"]  # the agent's own file
