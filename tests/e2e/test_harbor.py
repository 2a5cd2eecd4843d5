"""The harbor engine with Harbor itself (e2e): agreement with the local engine on sat3,
evidence, a forged reward, rejected task folders, the certified engine version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rsiframe.evaluators.harbor import venv as harborenv
from rsiframe.evaluators.harbor.engine import HarborEngine
from rsiframe.evaluators.local import LocalEngine
from rsiframe.evaluators.registry import run_tasks
from rsiframe.recipe.evaluator import HarborEngineConfig, LocalEngineConfig
from rsiframe.tasks.taskset import TaskSet
from tests.support.cli import cli
from tests.support.harbor import SOLVER, harbor_recipe
from tests.support.paths import REPO, SAT3

pytestmark = pytest.mark.e2e


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


def test_local_and_harbor_engines_agree_on_sat3(tmp_path: Path) -> None:
    ts = _sample(tmp_path, 12)
    local = LocalEngine(LocalEngineConfig(agent=SOLVER, sandbox="bwrap"), tmp_path / "wl")
    harbor = HarborEngine(HarborEngineConfig(agent=SOLVER, concurrency=4), tmp_path / "wh")
    by_local = _rewards(local, ts, SAT3 / "seed")
    by_harbor = _rewards(harbor, ts, SAT3 / "seed")
    assert by_local == by_harbor
    assert 0 < sum(by_local.values()) < len(by_local)  # both outcomes occur: not vacuous


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


def test_a_forged_reward_never_counts(tmp_path: Path) -> None:
    ts = _sample(tmp_path, 2)
    cand = tmp_path / "forger"
    cand.mkdir()
    (cand / "agent.sh").write_text(FORGER)
    eng = HarborEngine(HarborEngineConfig(agent='sh "$RSI_CANDIDATE/agent.sh"'), tmp_path / "w")
    out = run_tasks(eng, ts, cand, sorted(ts.tasks), put=lambda b: "x")
    assert {t: r.reward for t, r in out.runs.items()} == {t: 0.0 for t in ts.tasks}
    assert all("forged" in r.trajectory["agent"]["stdout_tail"] for r in out.runs.values())


def test_a_task_harbor_rejects_stops_the_run_at_preflight(tmp_path: Path) -> None:
    ts = _sample(tmp_path, 5)
    bad = ts.root / "uf75-003" / "task.toml"
    bad.write_text(
        bad.read_text().replace('workdir = "/app"', 'workdir = "/app"\nmemory_mb = "lots"')
    )
    res = cli("run", str(harbor_recipe(tmp_path, ts.root)), "--out", str(tmp_path / "r"))
    assert res.exit_code == 2, res.stderr
    assert "uf75-003" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r").exists()


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


def test_a_run_on_harbor_certifies_the_engine_version_and_environment(tmp_path: Path) -> None:
    from rsiframe.archive.loader import load_run

    ts = _sample(tmp_path, 5)
    res = cli("run", str(harbor_recipe(tmp_path, ts.root)), "--out", str(tmp_path / "r"), "-q")
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
