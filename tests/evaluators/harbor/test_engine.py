"""rsiframe.evaluators.harbor.engine without Harbor: its config, job config and
fingerprint."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.certs.keys import key_dir
from rsiframe.evaluators.harbor import venv as harborenv
from rsiframe.evaluators.harbor.engine import HarborEngine
from rsiframe.recipe.evaluator import HarborEngineConfig
from rsiframe.tasks.taskset import TaskSet
from tests.support.harbor import SOLVER
from tests.support.paths import SAT3


def test_config_needs_exactly_one_agent() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        HarborEngineConfig()
    with pytest.raises(ValueError, match="exactly one"):
        HarborEngineConfig(agent="true", harbor_agent="oracle")
    with pytest.raises(ValueError):
        HarborEngineConfig(agent="true", environment="podman")  # type: ignore[arg-type]


def test_job_config_names_tasks_concurrency_environment_and_candidate(tmp_path: Path) -> None:
    ts = TaskSet.load(SAT3)
    tasks = [ts.tasks["uf75-001"], ts.tasks["uf75-002"]]
    eng = HarborEngine(HarborEngineConfig(agent=SOLVER, concurrency=4), tmp_path)
    cfg = eng.job_config(SAT3 / "seed", tasks, tmp_path / "jobs")
    assert cfg["n_concurrent_trials"] == 4
    assert [t["path"] for t in cfg["tasks"]] == [str(t.path.resolve()) for t in tasks]
    assert cfg["agents"][0]["import_path"] == "rsiframe_inharbor.agent:CandidateAgent"
    assert cfg["agents"][0]["kwargs"] == {"candidate_dir": str(SAT3 / "seed"), "command": SOLVER}
    env = cfg["environment"]
    assert env["import_path"] == "rsiframe_inharbor.environment:BwrapEnvironment"
    assert env["kwargs"]["candidate_dir"] == str(SAT3 / "seed")
    assert str(key_dir()) in env["kwargs"]["hide"]  # the key folder is masked, never shown
    cloud = HarborEngine(
        HarborEngineConfig(agent=SOLVER, environment="modal", environment_kwargs={"x": 1}),
        tmp_path,
    ).job_config(SAT3 / "seed", tasks, tmp_path / "jobs")
    assert cloud["environment"] == {"type": "modal", "kwargs": {"x": 1}}


def test_builtin_agent_takes_its_kwargs_from_the_candidate(tmp_path: Path) -> None:
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "agent.yaml").write_text("temperature: 0.3\nprompt_template: candidate:prompt.txt\n")
    eng = HarborEngine(
        HarborEngineConfig(harbor_agent="terminus-2", model="m", agent_config="agent.yaml"),
        tmp_path,
    )
    agent = eng.job_config(cand, [], tmp_path / "jobs")["agents"][0]
    assert agent["name"] == "terminus-2" and agent["model_name"] == "m"
    assert agent["kwargs"] == {"temperature": 0.3, "prompt_template": str(cand / "prompt.txt")}


def test_fingerprint_pins_the_harbor_version(tmp_path: Path, monkeypatch) -> None:
    eng = HarborEngine(HarborEngineConfig(agent="true"), tmp_path)
    before = eng.fingerprint()
    assert eng.lock_parts()["harbor"] == harborenv.HARBOR_VERSION
    assert eng.record_part() == {
        "engine": "harbor",
        "harbor_version": harborenv.HARBOR_VERSION,
        "environment": "bwrap",
    }
    monkeypatch.setattr(harborenv, "HARBOR_VERSION", "0.26.0")
    assert eng.fingerprint() != before
