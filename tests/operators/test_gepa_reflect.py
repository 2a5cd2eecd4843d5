"""GEPA's reflection and its minibatch through the real engine, gateway and stub (issue 31,
the audit's T-G2): the mutate request holds one component whole and every example of the
reflection minibatch (its instruction, the agent's output, the verifier's feedback),
passing and failing; the child is accepted on exactly the rollout's tasks; a parent that is
perfect on its minibatch is skipped before any model call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsiframe.archive.log import get_artifact
from rsiframe.gateway.stub import Answer, Script, StubLLM
from tests.support.cli import cli, events, status_json
from tests.support.gateway import serving
from tests.support.mini import make_mini

MODELS = """\
models:
  proposer: {base_url_env: LLM_BASE_URL, api_key_env: LLM_API_KEY, model: stub, retries: 0}
"""
GEPA = [
    "slots.select={operator: pareto}",
    "slots.rollout={operator: local, config: {max_tasks: 3, reuse_certified: false}}",
    "slots.mutate={operator: gepa_reflect, config: {model: proposer, max_tokens: 512,"
    " components: [config.yaml, agent.py]}}",
    "slots.validate={operator: minibatch, config: {tasks: rollout, size: 3}}",
    "slots.gate={operator: keep_all}",
    "surface.include=[config.yaml, agent.py]",
    "children_per_generation=1",
]


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StubLLM]:
    answer = "Every task needs a higher level.\n```yaml\nlevel: 9\nstyle: plain\n```\n"
    with serving(monkeypatch, Script(answers=[Answer(content=answer)])) as s:
        yield s


def test_reflection_sees_the_whole_component_and_every_minibatch_example(
    stub: StubLLM, tmp_path: Path
) -> None:
    mini = make_mini(tmp_path / "proj", generations=2, children=1, extra=MODELS)
    (mini.seed / "config.yaml").write_text("level: 4\nstyle: plain\n")  # solves t1, t3
    out = mini.run_dir()
    args = [a for s in GEPA for a in ("--set", s)]
    res = cli(
        "run",
        mini.recipe,
        "--out",
        out,
        "--quiet",
        *args,
        "--unset",
        "slots.analyze",
        "--unset",
        "slots.reflect",
    )
    assert res.exit_code == 0, res.stderr
    evs = events(out)
    ran = {
        (e["data"]["id"], e["data"]["purpose"]): e["data"]["task_ids"]
        for e in evs
        if e["type"] == "tasks_run"
    }
    rollout = ran[("c0001", "rollout")]
    assert len(rollout) == 3 and ran[("c0001", "minibatch")] == rollout  # the same tasks

    # one model call: the reflection; the second proposal was skipped before any
    assert len(stub.requests) == 1
    prompt = stub.requests[0]["messages"][-1]["content"]
    assert "level: 4\nstyle: plain" in prompt and "yaml.safe_load" not in prompt  # one file
    need = {"t1": 1, "t3": 3, "t5": 5, "t7": 7}
    for task in rollout:  # every example: the verifier's feedback and the instruction
        assert f"need {need[task]} got 4 reward {int(need[task] <= 4)}" in prompt
    assert prompt.count("Write your level to /app/answer.txt.") == 3
    assert any(need[t] <= 4 for t in rollout) and any(need[t] > 4 for t in rollout)
    assert "Lessons" not in prompt

    status = {c["id"]: c for c in status_json(out)["candidates"]}
    assert status["c0001"]["state"] == "admitted"
    rejected = next(e["data"] for e in evs if e["type"] == "candidate_rejected")
    assert rejected["id"] == "c0002" and rejected["stage"] == "mutate"
    assert "skipped the proposal" in rejected["reasons"][0] and "perfect" in rejected["reasons"][0]
    assert rejected["traceback"] is None
    mutation = next(
        e["data"] for e in evs if e["type"] == "candidate_mutated" and e["data"]["id"] == "c0001"
    )
    details = json.loads(get_artifact(out, mutation["mutation"]))["details"]
    assert details["component"] == "config.yaml" and details["minibatch"] == rollout
    assert cli("verify", out).exit_code == 0
