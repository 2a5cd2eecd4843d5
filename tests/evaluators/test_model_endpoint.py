"""A candidate's agent reaches a declared model at evaluation only through the run's
gateway: the local and Harbor engines' endpoints, and the checks on `evaluator.config.model`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsiframe.engine.evaluation import TaskRunner
from rsiframe.engine.preflight import evaluator_model
from rsiframe.errors import RecipeError
from rsiframe.evaluators.harbor.engine import HarborEngine
from rsiframe.evaluators.local import LocalEngine
from rsiframe.gateway.app import Gateway, Ledger
from rsiframe.gateway.stub import Answer, Script, ServerThread, StubLLM
from rsiframe.recipe.evaluator import HarborEngineConfig, LocalEngineConfig
from rsiframe.recipe.models import ModelSpec
from rsiframe.sandbox.bwrap import bwrap_works
from rsiframe.tasks.taskset import load_task
from tests.support.gateway import PROVIDER_SECRET
from tests.support.store import Store

HAVE_BWRAP = bwrap_works()


MODES = [
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(not HAVE_BWRAP, reason="platform limit: bubblewrap missing"),
    ),
    "process",
]


#: the candidate's agent: asks $RSI_MODEL at $OPENAI_BASE_URL, writes the answer, and
#: leaves what it could see of its environment in its logs
AGENT = """
import os, pathlib
from openai import OpenAI
c = OpenAI(max_retries=0)
text = c.chat.completions.create(model=os.environ["RSI_MODEL"], temperature=0,
    messages=[{"role": "user", "content": open(os.environ["RSI_INSTRUCTION"]).read()}]
).choices[0].message.content
pathlib.Path(os.environ["RSI_APP"], "answer.txt").write_text(text.strip() + "\\n")
environ = open("/proc/self/environ", "rb").read().decode(errors="replace")
pathlib.Path(os.environ["RSI_LOGS"], "agent", "env.txt").write_text(environ)
"""


TEST_SH = """#!/bin/bash
got=$(cat "${RSI_APP:-/app}/answer.txt" 2>/dev/null)
if [ "$got" = 42 ]; then r=1; else r=0; fi
echo $r > "${RSI_LOGS:-/logs}/verifier/reward.txt"
"""


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[StubLLM, Gateway]]:
    stub = StubLLM(Script(answers=[Answer(content="42")]))
    srv = ServerThread(stub.app).start()
    spec = ModelSpec.model_validate(
        {"base_url": srv.url, "api_key_env": "PROVIDER_KEY", "model": "stub", "retries": 0}
    )
    gw = Gateway(
        {"solver": spec}, Ledger(tmp_path / "gw"), environ={"PROVIDER_KEY": PROVIDER_SECRET}
    )
    gw.start()
    try:
        yield stub, gw
    finally:
        gw.stop()
        srv.stop()


def _task(root: Path):  # type: ignore[no-untyped-def]
    t = root / "t1"
    (t / "environment").mkdir(parents=True)
    (t / "tests").mkdir()
    (t / "task.toml").write_text('version = "1.0"\n[agent]\ntimeout_sec = 60\n')
    (t / "instruction.md").write_text("What is six times seven? Answer with the number.\n")
    (t / "tests" / "test.sh").write_text(TEST_SH)
    return load_task(t)


def _candidate(tmp_path: Path) -> Path:
    c = tmp_path / "candidate"
    c.mkdir()
    (c / "agent.py").write_text(AGENT)
    return c


@pytest.mark.parametrize("mode", MODES)
def test_the_candidates_agent_calls_the_declared_model_through_the_gateway(
    gateway: tuple[StubLLM, Gateway], tmp_path: Path, mode: str
) -> None:
    stub, gw = gateway
    work = tmp_path / "work"
    work.mkdir()
    cfg = LocalEngineConfig(agent='python3 "$RSI_CANDIDATE/agent.py"', sandbox=mode, model="solver")  # type: ignore[arg-type]
    engine = LocalEngine(cfg, work)
    runner = TaskRunner(engine, None, None, None, None, None, None, None, gateway=gw)  # type: ignore[arg-type]
    store = Store()
    try:
        task = _task(tmp_path / "tasks")
        out = engine.run(
            _candidate(tmp_path), [task], store.put, **runner.gateway_hooks("c7", "train")
        )
    finally:
        engine.close()
    run = out.runs["t1"]
    assert run.reward == 1.0, run.trajectory
    # metered to the candidate, slot evaluate; the stub saw the declared model's own name
    (entry,) = [json.loads(x) for x in gw.ledger.path.read_text().splitlines()]
    assert (entry["candidate"], entry["slot"], entry["consumer"]) == (
        "c7",
        "evaluate",
        "evaluate:train:c7",
    )
    assert stub.requests[0]["model"] == "stub"
    # the agent saw a per-evaluation token and the forwarder, never the provider's key
    env = store.blobs[run.trajectory["artifacts"]["logs/agent/env.txt"]].decode()
    assert PROVIDER_SECRET not in env and "OPENAI_API_KEY=rsi-" in env
    assert "OPENAI_BASE_URL=http://127.0.0.1:" in env and "RSI_MODEL=solver" in env
    assert not any(PROVIDER_SECRET.encode() in b for b in store.blobs.values())


def test_a_model_without_a_gateway_is_an_evaluation_failure(tmp_path: Path) -> None:
    engine = LocalEngine(LocalEngineConfig(agent="true", sandbox="process", model="m"), tmp_path)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="needs the run's model gateway"):
        engine.run(_candidate(tmp_path), [_task(tmp_path / "tasks")], Store().put)


def test_evaluator_model_is_checked(tmp_path: Path) -> None:
    spec = ModelSpec.model_validate({"base_url": "http://x/v1", "model": "m"})
    cfg = LocalEngineConfig(agent="true", sandbox="process", model="nope")  # type: ignore[arg-type]
    with pytest.raises(
        RecipeError, match=r"evaluator\.config\.model: unknown model 'nope'; declared: a"
    ):
        evaluator_model("local", cfg, {"a": spec}, "r.yaml")
    assert evaluator_model("local", cfg.model_copy(update={"model": "a"}), {"a": spec}, "r") == "a"
    # harbor without models: its model is Harbor's own name, not a declared one
    hcfg = HarborEngineConfig(harbor_agent="terminus-2", model="openai/gpt-4o")
    assert evaluator_model("harbor", hcfg, {}, "r") is None
    with pytest.raises(ValueError, match="a D/T/H build serves"):
        LocalEngineConfig.model_validate({"agent": "x", "model": "a", "build": {}})


class _Endpoint:
    """A stand-in for the gateway's SandboxEndpoint (its harness, as serving.py's)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def harness(self, sb, argv):  # type: ignore[no-untyped-def]
        from rsiframe.gateway.app import SandboxEndpoint

        return SandboxEndpoint("e", self.folder, "rsi-tok", "solver").harness(sb, argv)


def test_harbor_job_routes_both_agent_kinds_through_the_gateway(tmp_path: Path) -> None:
    ep = _Endpoint(tmp_path / "sock")
    task = _task(tmp_path / "tasks")
    own = HarborEngine(HarborEngineConfig(agent="python3 agent.py", model="solver"), tmp_path)
    job = own.job_config(tmp_path / "cand", [task], tmp_path / "jobs", ep)  # type: ignore[arg-type]
    kwargs = job["agents"][0]["kwargs"]
    assert " forward --socket " in kwargs["command"] and kwargs["command"].endswith(
        "-- sh -c 'python3 agent.py'"
    )
    assert kwargs["task_env"] == {"RSI_MODEL": "solver", "OPENAI_API_KEY": "rsi-tok"}
    assert str(tmp_path / "sock") in job["environment"]["kwargs"]["ro_binds"]
    builtin = HarborEngine(HarborEngineConfig(harbor_agent="terminus-2", model="solver"), tmp_path)
    job = builtin.job_config(tmp_path / "cand", [task], tmp_path / "jobs", ep)  # type: ignore[arg-type]
    assert job["agents"][0]["model_name"] == "openai/solver"
    docker = HarborEngine(
        HarborEngineConfig(agent="x", model="solver", environment="docker"), tmp_path
    )
    with pytest.raises(RuntimeError, match="bwrap environment only"):
        docker.job_config(tmp_path / "cand", [task], tmp_path / "jobs", ep)  # type: ignore[arg-type]
