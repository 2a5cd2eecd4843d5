"""The Ray executor on a local Ray (``ray.init(num_cpus=2)``): same results, evidence, failures.

Needs the ``cluster`` extra (``pip install -e '.[cluster]'``); CI installs it.
"""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.support.cli import cli, events, status_json
from tests.support.mini import Mini, make_mini
from tests.support.ray import RAY, certified

ray = pytest.importorskip("ray", reason="the cluster extra (ray) is not installed")
pytestmark = pytest.mark.usefixtures("local_ray")


def _scores(run_dir: Path) -> dict[tuple[str, str], tuple[float, dict]]:
    return {(p["candidate"], p["split"]): (p["score"], p["rewards"]) for p in certified(run_dir)}


def test_ray_gives_the_same_run_as_local_and_records_the_worker(mini: Mini) -> None:
    sets = ["--set", "budget.max_generations=2"]
    local, remote = mini.run_dir("local"), mini.run_dir("ray")
    assert cli("run", mini.recipe, "--out", local, "--quiet", *sets).exit_code == 0
    res = cli("run", mini.recipe, "--out", remote, "--quiet", *sets, *RAY)
    assert res.exit_code == 0, res.stderr
    a, b = status_json(local), status_json(remote)
    assert b["champion"] == a["champion"] and a["champion"] != "c0000"
    assert _scores(remote) == _scores(local)
    nodes = {n["NodeID"] for n in ray.nodes()}
    preds = certified(remote)
    assert all(p["executor"]["kind"] == "ray" and p["executor"]["node"] in nodes for p in preds)
    # evidence came back and was written by the driver: verify checks every artifact
    assert cli("verify", remote).exit_code == 0
    trajectories = {d for p in preds for d in p["trajectories"].values()}
    assert all((remote / "artifacts" / "sha256" / d[7:9] / d[9:]).is_file() for d in trajectories)


KILLER = textwrap.dedent("""\
    import os, signal, sys
    # the first trial to get here kills its Ray worker process, as an OOM killer would
    try:
        os.close(os.open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        os.execvp("python3", ["python3", os.environ["RSI_CANDIDATE"] + "/agent.py"])
    pid = os.getppid()
    while pid > 1:
        if open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"ray::"):
            os.kill(pid, signal.SIGKILL)
            break
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    """)


def test_a_worker_lost_mid_evaluation_is_a_failed_attempt_retried_as_usual(
    tmp_path: Path,
) -> None:
    mini = make_mini(tmp_path / "p", sandbox="process")  # the agent must see its Ray worker
    killer = tmp_path / "killer.py"
    killer.write_text(KILLER)
    marker = tmp_path / "killed"
    agent = f"evaluator.config.agent=python3 {killer} {marker}"
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", "--set", agent, *RAY)
    assert marker.exists()
    assert res.exit_code == 1  # the seed could not be evaluated: the run fails, resumably
    failed = [e["data"] for e in events(out) if e["type"] == "evaluation_failed"]
    assert len(failed) == 1 and failed[0]["attempt"] == 1
    assert "Ray worker was lost mid-evaluation" in failed[0]["error"]
    # nothing certified but the seed's other splits that ran beside the lost one (none at
    # K=1), and no child without its parent
    lost = failed[0]["split"]
    started = {e["data"]["split"] for e in events(out) if e["type"] == "evaluation_started"}
    assert {(p["candidate"], p["split"]) for p in certified(out)} == {
        ("c0000", s) for s in started - {lost}
    }

    res = cli("resume", out, "--quiet", "--retry-failed")
    assert res.exit_code == 0, res.stderr
    seed_lost = [p for p in certified(out) if (p["candidate"], p["split"]) == ("c0000", lost)]
    assert [p["attempt"] for p in seed_lost] == [2]  # certified once, as the second attempt
    assert status_json(out)["state"] == "finished"


def test_a_worker_with_another_evaluator_is_refused(
    mini: Mini, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsiframe.evaluators import local as evaluator

    # the driver's evaluator code differs from what the workers run: nothing is certified
    monkeypatch.setattr(evaluator, "_code_digest", lambda: "other-code")
    out = mini.run_dir()
    res = cli("run", mini.recipe, "--out", out, "--quiet", *RAY)
    assert res.exit_code == 1
    failed = [e["data"]["error"] for e in events(out) if e["type"] == "evaluation_failed"]
    assert failed and "EvaluatorRefused" in failed[0] and "differs from the run's" in failed[0]
    assert not certified(out)


def test_evidence_streams_back_per_task_and_ctrl_c_stops_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsiframe.archive.log import Event
    from rsiframe.archive.state import RunState
    from rsiframe.engine.loop import Engine, Progress

    mini = make_mini(tmp_path / "p", sandbox="process")
    mark = tmp_path / "finished"
    slow = f'[ "$RSI_TASK_ID" = t7 ] && sleep 6 && touch {mark}; python3 "$RSI_CANDIDATE/agent.py"'
    sets = ["evaluator.executor.kind=ray", f"evaluator.config.agent={slow}"]
    monkeypatch.setenv("RSIFRAME_GRACE_S", "0")  # Ctrl-C kills at once: no grace for t7
    engine = Engine.create(mini.recipe, sets, mini.run_dir())

    class CtrlC(Progress):
        finished = 0

        def event(self, ev: Event, state: RunState) -> None:
            # the seed's train attempt (with K > 1 its gate and sealed run beside it)
            if ev.type == "task_finished" and ev.data["split"] == "train":
                self.finished += 1
                if self.finished == 3:  # t1, t3, t5 came back while t7 still runs
                    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()

    engine.show_progress(CtrlC())
    with pytest.raises(KeyboardInterrupt):
        engine.drive()
    engine.close()
    evs = events(mini.run_dir())
    assert evs[-1]["type"] == "run_interrupted"
    finished = [e["data"] for e in evs if e["type"] == "task_finished"]
    kept = sorted(d["task"] for d in finished if d["split"] == "train")
    assert kept == ["t1", "t3", "t5"]  # the interrupted attempt keeps what it produced
    time.sleep(7)
    assert not mark.exists()  # the sandboxed agent on the worker was killed, not orphaned


def test_a_dth_build_rejected_on_the_worker_rejects_the_candidate(tmp_path: Path) -> None:
    from tests.support.dth import recipe, task_words, write_seed, write_tasks

    # the worker audits the training data against the gate and sealed items it was sent
    write_tasks(tmp_path / "tasks")
    gate_word = task_words(tmp_path / "tasks", "t2")[1]
    write_seed(tmp_path / "seed", data={"plant": [gate_word]})
    (tmp_path / "recipe.yaml").write_text(recipe())
    out = tmp_path / "run"
    res = cli("run", tmp_path / "recipe.yaml", "--out", out, "--quiet", *RAY)
    assert res.exit_code == 1  # the seed itself is contaminated: nothing to evolve
    seed = status_json(out)["candidates"][0]
    assert seed["state"] == "rejected"
    assert seed["reasons"][0].startswith("contamination: training data overlaps 1 gate item(s)")
    failed = [e["data"] for e in events(out) if e["type"] == "evaluation_failed"]
    assert failed[0]["build"]["audit"]["overlapping"] == {"gate": 1, "sealed": 0}
    assert not certified(out)
