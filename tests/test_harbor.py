"""The harbor engine: its job config and preflight (fast), and, with Harbor itself (e2e),
agreement with the local engine on sat3, a forged reward, and rejected task folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO, cli

from rsiframe.certs.keys import key_dir
from rsiframe.evaluators.harbor import venv as harborenv
from rsiframe.evaluators.harbor.engine import HarborEngine
from rsiframe.evaluators.local import LocalEngine
from rsiframe.evaluators.registry import run_tasks
from rsiframe.recipe.evaluator import HarborEngineConfig, LocalEngineConfig
from rsiframe.tasks.taskset import TaskSet

SAT3 = REPO / "tasks" / "sat3"
SOLVER = 'python3 "$RSI_CANDIDATE/solver.py"'


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


def _recipe(tmp_path: Path, tasks: Path, **config: object) -> Path:
    data = {
        "name": "h",
        "seed": str(SAT3 / "seed"),
        "tasks": {
            "path": str(tasks),
            "split": {"ratios": {"train": 0.4, "gate": 0.4, "sealed": 0.2}},
        },
        "surface": {"include": ["solver.yaml"]},
        "evaluator": {"engine": "harbor", "config": {"agent": SOLVER, **config}},
        "slots": {
            "select": {"operator": "best"},
            "rollout": {"operator": "local"},
            "mutate": {"operator": "knobs", "config": {"space": "knobs.yaml"}},
            "gate": {"operator": "improves_parent"},
            "record": {"operator": "notes"},
        },
        "budget": {"max_generations": 0},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_unknown_environment_is_one_line_exit_2(tmp_path: Path) -> None:
    res = cli(
        "run", str(_recipe(tmp_path, SAT3, environment="podman")), "--out", str(tmp_path / "r")
    )
    assert res.exit_code == 2
    assert "evaluator.config.environment" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r").exists()


def test_docker_engine_down_is_one_line_exit_2(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(
        "#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n"
    )
    (fake / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    res = cli(
        "run", str(_recipe(tmp_path, SAT3, environment="docker")), "--out", str(tmp_path / "r")
    )
    assert res.exit_code == 2, res.stderr
    assert "Docker engine is not running" in res.stderr
    assert not (tmp_path / "r").exists()


def test_an_environment_that_cannot_start_is_one_line_exit_2(tmp_path: Path, monkeypatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no bubblewrap here
    res = cli("run", str(_recipe(tmp_path, SAT3)), "--out", str(tmp_path / "r"))
    assert res.exit_code == 2, res.stderr
    assert "the bwrap environment needs bubblewrap" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


# -- with Harbor itself ----------------------------------------------------------------


def _sample(tmp_path: Path, n: int) -> TaskSet:
    """The first ``n`` sat3 tasks, copied (the seed solves a few of them)."""
    root = tmp_path / "tasks"
    root.mkdir()
    for tid in sorted(p.name for p in SAT3.glob("uf75-*"))[:n]:
        shutil.copytree(SAT3 / tid, root / tid)
    return TaskSet.load(root)


def _rewards(engine, ts: TaskSet, cand: Path) -> dict[str, float]:
    out = run_tasks(engine, ts, cand, sorted(ts.tasks), put=lambda b: "x")
    engine.close()
    return {t: r.reward for t, r in out.runs.items()}


@pytest.mark.e2e
def test_local_and_harbor_engines_agree_on_sat3(tmp_path: Path) -> None:
    ts = _sample(tmp_path, 12)
    local = LocalEngine(LocalEngineConfig(agent=SOLVER, sandbox="bwrap"), tmp_path / "wl")
    harbor = HarborEngine(HarborEngineConfig(agent=SOLVER, concurrency=4), tmp_path / "wh")
    by_local = _rewards(local, ts, SAT3 / "seed")
    by_harbor = _rewards(harbor, ts, SAT3 / "seed")
    assert by_local == by_harbor
    assert 0 < sum(by_local.values()) < len(by_local)  # both outcomes occur: not vacuous


@pytest.mark.e2e
def test_harbor_trial_becomes_evidence(tmp_path: Path) -> None:
    ts = _sample(tmp_path, 1)
    blobs: dict[str, bytes] = {}

    def put(data: bytes) -> str:
        from rsiframe.util.digest import sha256_bytes

        blobs[sha256_bytes(data)] = data
        return sha256_bytes(data)

    eng = HarborEngine(HarborEngineConfig(agent=SOLVER), tmp_path / "w")
    out = run_tasks(eng, ts, SAT3 / "seed", sorted(ts.tasks), put)
    (run,) = out.runs.values()
    refs = run.trajectory["artifacts"]
    assert "harbor/agent/trajectory.json" in refs and "harbor/result.json" in refs
    assert json.loads(blobs[refs["harbor/agent/trajectory.json"]])["schema_version"].startswith(
        "ATIF"
    )
    timings = run.trajectory["harbor"]["timings"]
    assert timings["agent_execution"] > 0 and timings["verifier"] > 0
    job = json.loads(blobs[run.trajectory["harbor"]["job"]])["harbor_job"]
    assert "result.json" in job and "config.json" in job


FORGER = r"""#!/bin/sh
# answers nothing, writes its own reward, and leaves a process to write it again later
mkdir -p /logs/verifier
echo 1 > /logs/verifier/reward.txt
echo '{"reward": 1}' > /logs/verifier/reward.json
mkdir -p /tests && printf '#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n' > /tests/test.sh
(setsid sh -c 'for i in $(seq 50); do echo 1 >/logs/verifier/reward.txt; sleep 0.1; done' &)
printf '#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n' > /usr/local/bin/python3 2>/dev/null
chmod +x /usr/local/bin/python3 2>/dev/null
echo forged
exit 0
"""


@pytest.mark.e2e
def test_a_forged_reward_never_counts(tmp_path: Path) -> None:
    ts = _sample(tmp_path, 2)
    cand = tmp_path / "forger"
    cand.mkdir()
    (cand / "agent.sh").write_text(FORGER)
    eng = HarborEngine(HarborEngineConfig(agent='sh "$RSI_CANDIDATE/agent.sh"'), tmp_path / "w")
    out = run_tasks(eng, ts, cand, sorted(ts.tasks), put=lambda b: "x")
    assert {t: r.reward for t, r in out.runs.items()} == {t: 0.0 for t in ts.tasks}
    assert all("forged" in r.trajectory["agent"]["stdout_tail"] for r in out.runs.values())


@pytest.mark.e2e
def test_a_task_harbor_rejects_stops_the_run_at_preflight(tmp_path: Path) -> None:
    ts = _sample(tmp_path, 5)
    bad = ts.root / "uf75-003" / "task.toml"
    bad.write_text(
        bad.read_text().replace('workdir = "/app"', 'workdir = "/app"\nmemory_mb = "lots"')
    )
    res = cli("run", str(_recipe(tmp_path, ts.root)), "--out", str(tmp_path / "r"))
    assert res.exit_code == 2, res.stderr
    assert "uf75-003" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.e2e
def test_dockerfile_run_lines_set_up_the_system_as_namespace_root(tmp_path: Path) -> None:
    task = tmp_path / "tasks" / "setup"
    shutil.copytree(REPO / "tasks" / "terminal" / "hello-file", task)
    (task / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\nRUN id -u > /opt/built-by && \\\n"
        "    echo built >> /opt/built-by\n"
    )
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\n[ "$(cat /opt/built-by)" = "$(printf "0\\nbuilt")" ] && r=1 || r=0\n'
        "echo $r > /logs/verifier/reward.txt\n"
    )
    ts = TaskSet.load(tmp_path / "tasks")
    cand = tmp_path / "cand"
    cand.mkdir()
    # the agent (uid 1000) may not undo the set-up's system change for the verifier
    eng = HarborEngine(
        HarborEngineConfig(agent="rm -f /opt/built-by; id -u", run_dockerfile=True), tmp_path / "w"
    )
    out = run_tasks(eng, ts, cand, ["setup"], put=lambda b: "x")
    assert out.runs["setup"].reward == 1.0, out.runs["setup"].trajectory
    assert out.runs["setup"].trajectory["agent"]["stdout_tail"].strip() == "1000"


@pytest.mark.e2e
def test_a_run_on_harbor_certifies_the_engine_version_and_environment(tmp_path: Path) -> None:
    from rsiframe.archive.loader import load_run

    ts = _sample(tmp_path, 5)
    res = cli("run", str(_recipe(tmp_path, ts.root)), "--out", str(tmp_path / "r"), "-q")
    assert res.exit_code == 0, res.stderr
    seed = load_run(tmp_path / "r").state.candidates["c0000"]
    for split in ("train", "gate", "sealed"):
        pred = seed.record(split).predicate
        assert pred.evaluator == {
            "engine": "harbor",
            "harbor_version": harborenv.HARBOR_VERSION,
            "environment": "bwrap",
        }
        assert pred.isolation == "bwrap"
    assert cli("verify", str(tmp_path / "r")).exit_code == 0
