"""The agent_cli operator: its profiles, a missing CLI, and its command in the sandbox
through the gateway."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from pydantic import ValidationError

from rsiframe.gateway.stub import Answer
from rsiframe.operators import agent_cli
from rsiframe.operators.agent_cli import AgentCli, AgentCliConfig, render_command
from rsiframe.sandbox.bwrap import bwrap_works
from tests.support.llmops import Models, mctx, scripted, work_tree


def test_agent_cli_profiles_render_and_a_missing_cli_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the agents extra installs mini-swe-agent: its profile renders with the CLI found
    mini = AgentCliConfig(model="p", profile="mini-swe-agent")
    assert render_command(mini, "go", "/w").endswith("--model openai/p --task go")
    monkeypatch.setattr(agent_cli, "find_cli", lambda exe: None)  # as on a bare machine
    cmd = AgentCliConfig(model="p", profile="command", command="agent --in {workdir} {instruction}")
    assert render_command(cmd, "fix 'it'", "/rsi/work") == (
        "agent --in /rsi/work 'fix '\"'\"'it'\"'\"''"
    )
    # {temperature}: the operator's temperature, for an agent that samples at what it is told
    hot = AgentCliConfig(
        model="p", profile="command", command="a -t {temperature}", temperature=0.8
    )
    assert render_command(hot, "go", "/w") == "a -t 0.8"
    for profile in ("mini-swe-agent", "codex", "claude", "opencode"):
        with pytest.raises(ValidationError, match=f"profile {profile}: the '.*' command is not on"):
            AgentCliConfig(model="p", profile=profile)
    with pytest.raises(ValidationError, match="profile command needs a command"):
        AgentCliConfig(model="p", profile="command")


AGENT = """
import os, sys
from openai import OpenAI
c = OpenAI(max_retries=0)
text = c.chat.completions.create(model=os.environ["RSI_MODEL"], temperature=0,
    messages=[{"role": "user", "content": sys.argv[1]}]).choices[0].message.content
open("agent.py", "w").write(text)
"""


@pytest.mark.skipif(not bwrap_works(), reason="platform limit: bubblewrap does not work here")
@scripted(Answer(content="x = 42\n"))
def test_agent_cli_command_runs_in_the_sandbox_through_the_gateway(
    models: Models, tmp_path: Path
) -> None:
    work = work_tree(tmp_path, {"agent.py": "x = 1\n"})
    cfg = AgentCliConfig(
        model="proposer",
        profile="command",
        command=f"python3 -c {shlex.quote(AGENT)} {{instruction}}  # braces: ${{HOME}}",
        timeout_s=60,
    )
    m = AgentCli(cfg).mutate(mctx(work))
    assert (work / "agent.py").read_text() == "x = 42\n"
    assert (
        m.sandbox is not None
        and m.sandbox.isolation.startswith("bwrap ")
        and m.sandbox.network == []
    )
    (entry,) = [json.loads(x) for x in models.gw.ledger.path.read_text().splitlines()]
    # the consumer names the operator; the candidate is its own field (a retaken proposal
    # asks the same request, so the ledger can answer it)
    assert entry["consumer"] == "agent_cli" and entry["candidate"] == "c1"
    assert "solved 1 of 2" in models.stub.requests[0]["messages"][0]["content"]
