"""Model-driven operators against the scripted stub, through the real gateway and client."""

from __future__ import annotations

import functools
import json
import random
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import ValidationError

from rsiframe import llm
from rsiframe.api import CandidateView, MutateContext, ReflectContext, Rollout
from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.operators import agent_cli
from rsiframe.operators.agent_cli import AgentCli, AgentCliConfig, render_command
from rsiframe.operators.llm_edit import EditRejected, LlmEdit, LlmEditConfig
from rsiframe.operators.llm_evidence import LlmEvidence, LlmEvidenceConfig
from rsiframe.operators.llm_lessons import LlmLessons, LlmLessonsConfig
from rsiframe.recipe.models import ModelSpec
from rsiframe.sandbox.bwrap import bwrap_works

PARENT = CandidateView("c0", None, 0, "admitted", "abc", "def", "seed")
ROLLOUT = Rollout(
    trajectories=[
        {"task": "t1", "reward": 0.0, "error": None, "stdout_tail": "AssertionError in mean"},
        {"task": "t2", "reward": 1.0, "stdout_tail": "ok"},
    ]
)


@dataclass
class Models:
    stub: StubLLM
    gw: Gateway

    def prompts(self) -> list[str]:
        return [r["messages"][-1]["content"] for r in self.stub.requests]


@pytest.fixture
def models(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Models]:
    stub = StubLLM(Script(answers=list(request.param)))
    srv = ServerThread(stub.app).start()
    spec = ModelSpec.model_validate({"base_url": srv.url, "model": "stub", "retries": 0})
    gw = Gateway({"proposer": spec}, Ledger(tmp_path / "gw"), environ={}).start()
    client = gw.client("mutate:c1", candidate="c1", slot="mutate")
    endpoints = functools.partial(gw.sandbox_endpoint, candidate="c1", slot="mutate")
    try:
        with llm.use(client, endpoints):
            yield Models(stub, gw)
    finally:
        gw.stop()
        srv.stop()


def scripted(*answers: Answer) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("models", [answers], indirect=True)


def mctx(work: Path, include: tuple[str, ...] = ("*.py", "*.md")) -> MutateContext:
    return MutateContext(
        run=None,  # type: ignore[arg-type]  # mutate operators here read no run state
        rng=random.Random(0),
        generation=1,
        candidate_id="c1",
        parent=PARENT,
        workdir=work,
        rollout=ROLLOUT,
        analysis=None,
        lessons="keep prompts short",
        surface_include=include,
        surface_exclude=(),
    )


def _work(tmp_path: Path, files: dict[str, str]) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    return work


EDIT = (
    "Divide by the length.\nagent.py\n```\n<<<<<<< SEARCH\nn - 1\n=======\nn\n>>>>>>> REPLACE\n```"
)


@scripted(
    Answer(content="agent.py\n<<<<<<< SEARCH\nnot there\n=======\nx\n>>>>>>> REPLACE"),
    Answer(content=EDIT),
)
def test_llm_edit_feeds_a_failed_block_back_then_applies(models: Models, tmp_path: Path) -> None:
    work = _work(tmp_path, {"agent.py": "d = n - 1\n", "README.txt": "not in the surface"})
    # the run-wide lessons are shown only when the recipe asks for them (issue 31)
    shown = {"lessons": True}
    op = LlmEdit(LlmEditConfig(model="proposer", notes="be brief", context=shown))  # type: ignore[arg-type]
    m = op.mutate(mctx(work))
    assert (work / "agent.py").read_text() == "d = n\n"
    assert m.description == "Divide by the length."
    assert m.details["failed_attempts"][0]["error"].startswith("block 1: the SEARCH text")
    first, second = models.stub.requests
    prompt = first["messages"][0]["content"]
    assert "d = n - 1" in prompt and "AssertionError in mean" in prompt
    assert "keep prompts short" in prompt and "be brief" in prompt
    assert "not in the surface" not in prompt  # only surface files are shown
    assert "Your edit was not applied" in second["messages"][-1]["content"]
    assert models.gw.ledger.totals.calls == 2  # every call metered by the gateway


@scripted(Answer(content="no edits here", repeat=True))
def test_llm_edit_rejects_the_child_after_its_retries(models: Models, tmp_path: Path) -> None:
    work = _work(tmp_path, {"agent.py": "x = 1\n"})
    with pytest.raises(EditRejected, match="no applicable edit after 2 answers"):
        LlmEdit(LlmEditConfig(model="proposer", retries=1)).mutate(mctx(work))
    assert models.stub.stats.requests == 2
    # a whole-file answer for a file over whole_file_max_bytes is refused too
    (work / "agent.py").write_text("x = 1  # a different prompt, so no cached answer\n")
    models.stub.remaining.insert(0, Answer(content="agent.py\n```\nx = 2\n```\n"))
    cfg = LlmEditConfig(model="proposer", retries=0, whole_file_max_bytes=2)
    with pytest.raises(EditRejected, match="too large to replace whole"):
        LlmEdit(cfg).mutate(mctx(work))
    assert models.stub.stats.requests == 3
    assert (work / "agent.py").read_text().startswith("x = 1  #")


@scripted(
    Answer(content="```\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n```"),
    Answer(content="other.txt\n```\nwritten outside the surface\n```"),
)
def test_llm_edit_single_file_pathless_and_outside_surface_left_to_guardrail(
    models: Models, tmp_path: Path
) -> None:
    work = _work(tmp_path, {"agent.py": "x = 1\n"})
    LlmEdit(LlmEditConfig(model="proposer")).mutate(mctx(work, ("agent.py",)))
    assert (work / "agent.py").read_text() == "x = 2\n"
    m = LlmEdit(LlmEditConfig(model="proposer")).mutate(mctx(work, ("agent.py",)))
    assert m.details["changed"] == ["other.txt"]  # applied; the guardrail rejects it
    assert (work / "other.txt").read_text() == "written outside the surface\n"


def test_a_template_with_a_syntax_error_is_one_validation_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.j2"
    bad.write_text("Hello {{ files ")
    with pytest.raises(ValidationError, match="line 1"):
        LlmEditConfig(model="proposer", template=bad)
    good = tmp_path / "good.j2"
    good.write_text("{{ files | length }} files; fix it")
    assert LlmEditConfig(model="p", template=good).render("llm_edit.md.j2", files=[1]) == (
        "1 files; fix it"
    )


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
    work = _work(tmp_path, {"agent.py": "x = 1\n"})
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
    assert entry["consumer"] == "agent_cli:c1" and entry["candidate"] == "c1"
    assert "solved 1 of 2" in models.stub.requests[0]["messages"][0]["content"]
