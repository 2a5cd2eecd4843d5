"""agent_cli with the real mini-swe-agent, in bubblewrap, against the scripted stub
through the real gateway: the agent's edit lands in the child and its transcript is kept."""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path

import pytest

from rsiframe import llm
from rsiframe.api import CandidateView, MutateContext, Rollout
from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM, ToolCall
from rsiframe.operators.agent_cli import AgentCli, AgentCliConfig, find_cli
from rsiframe.recipe.models import ModelSpec
from rsiframe.sandbox.bwrap import bwrap_works

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not bwrap_works(), reason="platform limit: bubblewrap does not work here"),
]
SECRET = "sk-provider-secret-abcdef"


def _bash(command: str, note: str) -> Answer:
    return Answer(content=note, tool_calls=[ToolCall(name="bash", arguments={"command": command})])


def test_mini_swe_agent_edits_the_child_through_the_gateway(tmp_path: Path) -> None:
    assert find_cli("mini"), "mini-swe-agent is installed by the agents extra (make setup)"
    stub = StubLLM(
        Script(
            answers=[
                _bash("cat agent.py; env | grep OPENAI_", "Let me look at the agent."),
                _bash("sed -i 's/n - 1/n/' agent.py && cat agent.py", "Divide by n."),
                _bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "Done."),
            ]
        )
    )
    srv = ServerThread(stub.app).start()
    spec = ModelSpec.model_validate(
        {"base_url": srv.url, "api_key_env": "PROVIDER_KEY", "model": "stub", "retries": 0}
    )
    gw = Gateway({"coder": spec}, Ledger(tmp_path / "gw"), environ={"PROVIDER_KEY": SECRET})
    gw.start()
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text("def mean(xs):\n    n = len(xs)\n    return sum(xs) / (n - 1)\n")
    ctx = MutateContext(
        run=None,  # type: ignore[arg-type]  # agent_cli reads no run state
        rng=random.Random(0),
        generation=1,
        candidate_id="c3",
        parent=CandidateView("c0", None, 0, "admitted", "abc", "def", "seed"),
        workdir=work,
        rollout=Rollout(
            trajectories=[{"task": "mean", "reward": 0.0, "stdout_tail": "off by one"}]
        ),
        analysis=None,
        lessons="",
        surface_include=("agent.py",),
        surface_exclude=(),
    )
    cfg = AgentCliConfig(model="coder", profile="mini-swe-agent", timeout_s=240, sandbox="bwrap")
    endpoints = functools.partial(gw.sandbox_endpoint, candidate="c3", slot="mutate")
    try:
        with llm.use(gw.client("mutate:c3", candidate="c3", slot="mutate"), endpoints):
            m = AgentCli(cfg).mutate(ctx)
    finally:
        gw.stop()
        srv.stop()
    # the edit landed in the child's work folder
    assert "return sum(xs) / (n)" in (work / "agent.py").read_text()
    assert sorted(p.name for p in work.iterdir()) == ["agent.py"]  # no stray files
    # every model call went through the gateway, metered to the child, slot mutate
    entries = [json.loads(x) for x in gw.ledger.path.read_text().splitlines()]
    assert len(entries) == len(stub.requests) == 3
    assert {(e["candidate"], e["slot"], e["consumer"]) for e in entries} == {
        ("c3", "mutate", "agent_cli")
    }
    assert "off by one" in json.dumps(stub.requests[0]["messages"])  # the instruction
    # the transcript is kept: mini's trajectory, with the agent's commands and outputs
    traj = m.details["transcript"]["mini.traj.json"]
    assert "sed -i 's/n - 1/n/' agent.py" in traj and "COMPLETE_TASK" in traj
    assert m.sandbox is not None and m.sandbox.isolation.startswith("bwrap")
    # the agent saw its own gateway token, never the provider's key
    assert "OPENAI_API_KEY=rsi-" in traj and "OPENAI_BASE_URL=http://127.0.0.1:" in traj
    assert SECRET not in traj
