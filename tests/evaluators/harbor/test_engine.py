"""rsiframe.evaluators.harbor.engine without Harbor: its config, job config and
fingerprint."""

from __future__ import annotations

import time
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


def _fake_harbor(tmp_path: Path) -> str:
    """A stand-in for Harbor's Python: sleeps as long as its job folder says, then exits
    with the job folder's code (every argument ignored)."""
    py = tmp_path / "fake-python"
    py.write_text('#!/bin/sh\nsleep "$(cat seconds)"\ntouch ended\nexit "$(cat code)"\n')
    py.chmod(0o755)
    return str(py)


def _job_folder(tmp_path: Path, name: str, seconds: float, code: int) -> Path:
    job = tmp_path / name
    job.mkdir()
    (job / "seconds").write_text(str(seconds))
    (job / "code").write_text(str(code))
    (job / "job.json").write_text("{}")
    return job


def test_two_jobs_side_by_side_each_wait_for_their_own_process(tmp_path: Path) -> None:
    """The seed's splits (or several candidates) run Harbor jobs at once on one engine. Each
    job waits for its own process and gets its own exit code: when they shared one slot, the
    slow job returned as soon as the quick one ended, with the quick one's code, and its
    tasks had "no result" (CI, the harbor_linked_answer scenario at K=4)."""
    import threading

    py = _fake_harbor(tmp_path)
    eng = HarborEngine(HarborEngineConfig(agent="true"), tmp_path / "w")
    slow = _job_folder(tmp_path, "slow", 1.5, 5)
    quick = _job_folder(tmp_path, "quick", 0.1, 3)
    got: dict[str, tuple[int, bool]] = {}

    def job(folder: Path) -> None:
        code = eng._harbor(py, folder / "job.json", tmp_path, folder / "log", lambda: None)
        got[folder.name] = (code, (folder / "ended").exists())

    threads = [threading.Thread(target=job, args=(slow,))]
    threads[0].start()
    time.sleep(0.3)  # the slow job's process is running before the quick one starts
    threads.append(threading.Thread(target=job, args=(quick,)))
    threads[1].start()
    for t in threads:
        t.join(timeout=30)
    assert got == {"slow": (5, True), "quick": (3, True)}
    assert not eng._procs


def test_close_ends_every_job_running(tmp_path: Path) -> None:
    import threading

    py = _fake_harbor(tmp_path)
    eng = HarborEngine(HarborEngineConfig(agent="true"), tmp_path / "w")
    folders = [_job_folder(tmp_path, f"j{i}", 60, 0) for i in range(2)]
    threads = [
        threading.Thread(
            target=eng._harbor, args=(py, f / "job.json", tmp_path, f / "log", lambda: None)
        )
        for f in folders
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(eng._procs) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(eng._procs) == 2
    started = time.monotonic()
    eng.close()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads)
    assert time.monotonic() - started < 5
    assert not any((f / "ended").exists() for f in folders)
