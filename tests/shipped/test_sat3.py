"""The sat3 verifier counts the decisions itself and opens answer files safely.

The hack it closes: a solver that searches with no budget and prints ``c decisions 0``
scored 1.0 on every split, because the old verifier trusted that line. Now the verifier
runs the task's own DPLL engine with the candidate's ``solver.yaml``; the reported count
decides nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rsiframe.evaluators.local import LocalEngine
from rsiframe.recipe.evaluator import LocalEngineConfig
from rsiframe.tasks.taskset import TaskSet
from tests.support.paths import REPO, SAT3

sys.path.insert(0, str(SAT3 / "seed"))
import solver as seed_solver

#: a solver that ignores the budget (full search) and claims it made no decisions
CHEAT = """\
import os, sys
from pathlib import Path
here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import engine
app = Path(os.environ.get("RSI_APP", "/app"))
inst = engine.parse_cnf((app / "instance.cnf").read_text())
inst.max_decisions = 10**9
outcome = engine.Dpll(inst, engine.load_config(here / "solver.yaml")).solve()
print("real decisions", outcome.decisions)
outcome.decisions = 0
engine.write_solution(app / "solution.txt", outcome)
"""


def seed_outcome(task: str) -> object:
    inst = seed_solver.parse_cnf((SAT3 / task / "tests" / "instance.cnf").read_text())
    return seed_solver.Dpll(inst, seed_solver.load_config(SAT3 / "seed" / "solver.yaml")).solve()


def hard_and_easy() -> tuple[list[str], list[str]]:
    """Tasks the seed's knobs do not solve within the budget, and some it does."""
    tasks = sorted(p.name for p in SAT3.glob("uf75-*"))
    hard = [t for t in tasks if seed_outcome(t).status != "SATISFIABLE"]  # type: ignore[attr-defined]
    easy = [t for t in tasks if t not in hard]
    return hard[:3], easy[:1]


def verify(task: str, app: Path, candidate: Path, logs: Path) -> tuple[str, str]:
    """Run the task's test.sh as the verifier phase does; (reward, stdout)."""
    (logs / "verifier").mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "RSI_APP": str(app),
        "RSI_TESTS": str(SAT3 / task / "tests"),
        "RSI_LOGS": str(logs),
        "RSI_CANDIDATE": str(candidate),
    }
    res = subprocess.run(
        ["bash", str(SAT3 / task / "tests" / "test.sh")],
        env=env,
        cwd=app,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (logs / "verifier" / "reward.txt").read_text().strip(), res.stdout


def test_a_solver_claiming_zero_decisions_after_a_full_search_no_longer_scores() -> None:
    """Through the real evaluator (sandbox, agent phase, verifier phase)."""
    hard, easy = hard_and_easy()
    assert len(hard) == 3 and easy
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"sat3-cheat-{os.getpid()}"
    candidate = work / "candidate"
    shutil.copytree(SAT3 / "seed", candidate)
    shutil.copy(SAT3 / "seed" / "solver.py", candidate / "engine.py")
    (candidate / "solver.py").write_text(CHEAT)
    try:
        engine = LocalEngine(
            LocalEngineConfig(agent='python3 "$RSI_CANDIDATE/solver.py"', concurrency=2),
            work,
        )
        taskset = TaskSet.load(SAT3)
        out = engine.run(candidate, [taskset.tasks[t] for t in hard + easy], lambda b: "")
        engine.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for t in hard:  # a real model, "0 decisions" claimed: the verifier's own count says no
        run = out.runs[t]
        assert run.reward == 0.0, (t, run.trajectory["verifier"]["stdout_tail"])
        verifier_out = run.trajectory["verifier"]["stdout_tail"]
        assert "does not find one within 60 decisions" in verifier_out
        assert "reported 0 (not used)" in verifier_out
        assert "real decisions" in run.trajectory["agent"]["stdout_tail"]
    assert out.runs[easy[0]].reward == 1.0  # where the knobs really solve it, it still counts


def solve_into(app: Path, task: str) -> None:
    shutil.copy(SAT3 / task / "environment" / "instance.cnf", app / "instance.cnf")
    inst = seed_solver.parse_cnf((app / "instance.cnf").read_text())
    inst.max_decisions = 10**9
    cfg = seed_solver.load_config(SAT3 / "seed" / "solver.yaml")
    seed_solver.write_solution(app / "solution.txt", seed_solver.Dpll(inst, cfg).solve())


def test_the_reward_follows_the_knobs_not_the_claim(tmp_path: Path) -> None:
    hard, _ = hard_and_easy()
    task = hard[0]
    app, cand = tmp_path / "app", tmp_path / "cand"
    app.mkdir()
    cand.mkdir()
    solve_into(app, task)
    # the seed's knobs (defaults when solver.yaml is absent) cannot solve it within 60
    (cand / "solver.yaml").write_text((SAT3 / "seed" / "solver.yaml").read_text())
    assert verify(task, app, cand, tmp_path / "l1")[0] == "0"
    # good knobs can, and then the same model scores
    good = "branching: jw\npolarity: occurrence\npure_literals: true\n"
    (cand / "solver.yaml").write_text(good)
    good_outcome = seed_solver.Dpll(
        seed_solver.parse_cnf((app / "instance.cnf").read_text()),
        seed_solver.parse_config(
            {"branching": "jw", "polarity": "occurrence", "pure_literals": True}
        ),
    ).solve()
    want = "1" if good_outcome.status == "SATISFIABLE" else "0"
    assert verify(task, app, cand, tmp_path / "l2")[0] == want


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo", "huge"])
def test_answer_files_are_opened_without_following_links(tmp_path: Path, kind: str) -> None:
    _, easy = hard_and_easy()
    task = easy[0]
    real, app, cand = tmp_path / "real", tmp_path / "app", tmp_path / "cand"
    for d in (real, app, cand):
        d.mkdir()
    solve_into(real, task)
    shutil.copy(real / "instance.cnf", app / "instance.cnf")
    (cand / "solver.yaml").write_text((SAT3 / "seed" / "solver.yaml").read_text())
    shutil.copy(real / "solution.txt", app / "solution.txt")
    assert verify(task, app, cand, tmp_path / "ok")[0] == "1"  # the plain file scores
    (app / "solution.txt").unlink()
    if kind == "symlink":
        (app / "solution.txt").symlink_to(real / "solution.txt")
    elif kind == "hardlink":
        os.link(real / "solution.txt", app / "solution.txt")
    elif kind == "fifo":
        os.mkfifo(app / "solution.txt")
    else:
        (app / "solution.txt").write_bytes(b"c x\n" * (1 << 19))
    reward, out = verify(task, app, cand, tmp_path / "bad")
    assert reward == "0", out


def test_a_yaml_alias_in_the_knobs_is_refused(tmp_path: Path) -> None:
    _, easy = hard_and_easy()
    app, cand = tmp_path / "app", tmp_path / "cand"
    app.mkdir()
    cand.mkdir()
    solve_into(app, easy[0])
    (cand / "solver.yaml").write_text("a: &x first\nbranching: *x\n")
    reward, out = verify(easy[0], app, cand, tmp_path / "l")
    assert reward == "0" and "alias" in out


def test_textops_answers_are_opened_without_following_links(tmp_path: Path) -> None:
    task = REPO / "tasks" / "textops" / "textops-001"
    app, logs = tmp_path / "app", tmp_path / "logs"
    app.mkdir()
    (logs / "verifier").mkdir(parents=True)
    (app / "answers.jsonl").symlink_to(task / "tests" / "expected.jsonl")
    env = {**os.environ, "RSI_APP": str(app), "RSI_LOGS": str(logs)}
    res = subprocess.run(
        [sys.executable, str(task / "tests" / "check.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (logs / "verifier" / "reward.txt").read_text() == "0", res.stdout
    assert "cannot be opened as a plain file" in res.stdout
