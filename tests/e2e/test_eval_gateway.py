"""A candidate's agent reaches a declared model through the run's gateway on Harbor, and
the harbor hill-climb recipe against the stub (e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rsiframe.engine.evaluation import TaskRunner
from rsiframe.evaluators.harbor.engine import HarborEngine
from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.recipe.evaluator import HarborEngineConfig
from rsiframe.recipe.models import ModelSpec
from rsiframe.sandbox.bwrap import bwrap_works
from tests.support.gateway import PROVIDER_SECRET
from tests.support.paths import REPO
from tests.support.store import Store

pytestmark = pytest.mark.e2e


HAVE_BWRAP = bwrap_works()


@pytest.mark.skipif(not HAVE_BWRAP, reason="platform limit: bubblewrap missing")
def test_the_terminal_seed_agent_solves_a_task_on_harbor_through_the_gateway(
    tmp_path: Path,
) -> None:
    import shutil

    from rsiframe.evaluators.registry import run_tasks
    from rsiframe.tasks.taskset import TaskSet

    repo = REPO
    step = {
        "analysis": "empty folder",
        "plan": "write the file",
        "commands": [{"keystrokes": "printf 'Hello, world!\\n' > hello.txt && env\n"}],
        "task_complete": False,
    }
    done = {"analysis": "written", "plan": "", "commands": [], "task_complete": True}
    stub = StubLLM(
        Script(answers=[Answer(content=json.dumps(step)), Answer(content=json.dumps(done))])
    )
    srv = ServerThread(stub.app).start()
    spec = ModelSpec.model_validate(
        {"base_url": srv.url, "api_key_env": "PROVIDER_KEY", "model": "stub", "retries": 0}
    )
    gw = Gateway(
        {"solver": spec}, Ledger(tmp_path / "gw"), environ={"PROVIDER_KEY": PROVIDER_SECRET}
    )
    gw.start()
    shutil.copytree(repo / "tasks" / "terminal" / "hello-file", tmp_path / "tasks" / "hello-file")
    cfg = HarborEngineConfig(agent="python3 /candidate/agent.py", model="solver")
    engine = HarborEngine(cfg, tmp_path / "w")
    runner = TaskRunner(engine, None, None, None, None, None, None, None, gateway=gw)  # type: ignore[arg-type]
    store = Store()
    try:
        out = run_tasks(
            engine,
            TaskSet.load(tmp_path / "tasks"),
            repo / "tasks" / "terminal" / "seed",
            ["hello-file"],
            store.put,
            **runner.gateway_hooks("c2", "train"),
        )
    finally:
        gw.stop()
        srv.stop()
    run = out.runs["hello-file"]
    assert run.reward == 1.0, run.trajectory
    entries = [json.loads(x) for x in gw.ledger.path.read_text().splitlines()]
    assert len(entries) == len(stub.requests) == 2
    assert {(e["candidate"], e["slot"]) for e in entries} == {("c2", "evaluate")}
    assert "Hello, world!" in stub.requests[0]["messages"][1]["content"]  # the task
    # the command's output (its environment) went back to the model: a token, no key
    seen = stub.requests[1]["messages"][-1]["content"]
    assert "OPENAI_API_KEY=rsi-" in seen and PROVIDER_SECRET not in seen


@pytest.mark.skipif(not HAVE_BWRAP, reason="platform limit: bubblewrap missing")
def test_harbor_hill_climb_evolves_the_agents_prompt_against_the_stub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.cli import cli, events, status_json

    done = {"analysis": "", "plan": "", "commands": [], "task_complete": True}
    edit = (
        "Ask for smaller steps.\nprompt.md\n```\n<<<<<<< SEARCH\nWork in small steps: "
        "inspect the files the\n=======\nWork in very small steps: inspect the files the\n"
        ">>>>>>> REPLACE\n```"
    )
    stub = StubLLM(
        Script(
            answers=[Answer(content=edit, when="SEARCH/REPLACE")],
            default=Answer(content=json.dumps(done)),  # the agent gives up at once
        )
    )
    srv = ServerThread(stub.app).start()
    monkeypatch.setenv("LLM_BASE_URL", srv.url)
    monkeypatch.setenv("LLM_API_KEY", "stub-key")
    out = tmp_path / "run"
    sets = ["budget.max_generations=1", "children_per_generation=1"]
    try:
        res = cli(
            "run",
            REPO / "recipes" / "harbor-hill-climb.yaml",
            "--out",
            out,
            "--quiet",
            *[a for s in sets for a in ("--set", s)],
        )
    finally:
        srv.stop()
    assert res.exit_code == 0, res.stderr
    status = status_json(out)
    assert status["state"] == "finished"
    (child,) = [c for c in status["candidates"] if c["parent"]]
    assert child["description"] == "Ask for smaller steps."
    mutated = [e["data"] for e in events(out) if e["type"] == "candidate_mutated"]
    assert {"path": "prompt.md", "kind": "modified"} in mutated[-1]["changes"]
    # the agent's calls at evaluation went through the gateway, metered to each candidate
    by_slot = status["models_by_slot"]
    assert by_slot["evaluate"]["model_calls"] > 0 and by_slot["mutate"]["model_calls"] == 1
    calls = [e["data"] for e in events(out) if e["type"] == "model_call"]
    assert {c["candidate"] for c in calls if c["slot"] == "evaluate"} >= {child["id"]}
