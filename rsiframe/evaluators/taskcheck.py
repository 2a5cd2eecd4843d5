"""``rsiframe tasks check PATH [--oracle]``: validate a Harbor task folder or data set.

Static checks: rsiframe's own loader (``task.toml``, ``instruction.md``,
``tests/test.sh``), Harbor's task loader (what ``harbor run`` would reject), and whether
a reference solution exists. With ``--oracle`` each task's ``solution/solve.sh`` runs as
the agent on both engines: on ``local`` through a candidate holding every task's
solution (``solutions/<task>/``), on ``harbor`` as Harbor's own ``oracle`` agent in the
``bwrap`` environment. Every task whose reference solution does not score 1.0 is a problem.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rsiframe.errors import TaskSetError
from rsiframe.evaluators.base import EvaluationOutput, Evaluator, Put, TaskRun
from rsiframe.evaluators.harbor.engine import HarborEngine
from rsiframe.evaluators.harbor.preflight import harbor_task_problems
from rsiframe.evaluators.local import LocalEngine
from rsiframe.evaluators.registry import run_tasks
from rsiframe.recipe.evaluator import ENGINES as ENGINE_TABLE
from rsiframe.recipe.evaluator import HarborEngineConfig, LocalEngineConfig
from rsiframe.tasks.taskset import Task, TaskSet, load_task

ORACLE_AGENT = 'bash "$RSI_CANDIDATE/solutions/$RSI_TASK_ID/solve.sh"'
#: the engines a task set is checked on (every evaluator engine)
ENGINES = tuple(ENGINE_TABLE)


@dataclass
class Problem:
    task: str
    what: str

    def __str__(self) -> str:
        return f"{self.task}: {self.what}"


@dataclass
class CheckReport:
    path: str
    tasks: int
    problems: list[Problem]
    oracle: dict[str, dict[str, float]]  # engine -> task -> reward

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "path": self.path,
            "tasks": self.tasks,
            "problems": [asdict(p) for p in self.problems],
            "oracle": self.oracle,
        }


def task_folders(path: Path) -> list[Path]:
    """PATH itself when it is a task, else its subfolders holding a ``task.toml``."""
    if not path.is_dir():
        raise TaskSetError("no such folder", where=str(path))
    if (path / "task.toml").is_file():
        return [path]
    found = sorted(c for c in path.iterdir() if c.is_dir() and (c / "task.toml").is_file())
    if not found:
        raise TaskSetError("no task here (no task.toml, no subfolder holding one)", where=str(path))
    return found


def check(path: Path, *, oracle: bool = False, engines: tuple[str, ...] = ENGINES) -> CheckReport:
    folders = task_folders(path)
    problems: list[Problem] = []
    loaded: dict[str, Task] = {}
    for folder in folders:
        try:
            loaded[folder.name] = load_task(folder)
        except TaskSetError as exc:
            problems.append(Problem(folder.name, exc.message))
    for where, why in harbor_task_problems(folders):
        problems.append(Problem(Path(where).name, f"Harbor rejects it: {why}"))
    for tid, task in loaded.items():
        if not (task.path / "solution" / "solve.sh").is_file():
            problems.append(Problem(tid, "no solution/solve.sh (no reference solution)"))
    rewards: dict[str, dict[str, float]] = {}
    if oracle:
        runnable = [t for t in loaded.values() if (t.path / "solution" / "solve.sh").is_file()]
        for engine in engines:
            runs = _oracle(engine, runnable)
            rewards[engine] = {tid: r.reward for tid, r in sorted(runs.items())}
            for tid, run in sorted(runs.items()):
                if run.reward != 1.0:
                    why = f": {run.error}" if run.error else ""
                    problems.append(
                        Problem(
                            tid, f"the reference solution scores {run.reward:g} on {engine}{why}"
                        )
                    )
    return CheckReport(str(path), len(folders), problems, rewards)


def _oracle(engine: str, tasks: list[Task]) -> dict[str, TaskRun]:
    if not tasks:
        return {}
    scratch = Path(tempfile.mkdtemp(prefix="rsiframe-oracle-"))
    try:
        cand = scratch / "candidate"
        cand.mkdir()
        if engine == "local":
            for t in tasks:
                shutil.copytree(t.path / "solution", cand / "solutions" / t.id, symlinks=True)
        agent = ORACLE_AGENT if engine == "local" else None
        return run_agent(engine, tasks, cand, scratch / "work", agent=agent).runs
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_agent(
    engine: str,
    tasks: list[Task],
    candidate: Path,
    work: Path,
    *,
    agent: str | None,
    concurrency: int = 4,
    sandbox: str = "auto",
    put: Put = lambda data: "",
    on_done: Callable[[TaskRun], None] | None = None,
    on_engine: Callable[[Evaluator], None] | None = None,
) -> EvaluationOutput:
    """Run ``tasks`` with ``agent`` (a command run from ``candidate``; None: Harbor's own
    oracle agent) on ``engine``, as a real run's evaluation would (``tasks audit`` too;
    ``on_engine`` gets the engine first, so a caller can stop it)."""
    ts = TaskSet(root=work, tasks={t.id: t for t in tasks})
    if engine == "local":
        config = LocalEngineConfig(agent=agent or "true", concurrency=concurrency, sandbox=sandbox)
        runner: Evaluator = LocalEngine(config, work)
    else:
        runner = HarborEngine(
            HarborEngineConfig(
                agent=agent, harbor_agent=None if agent else "oracle", concurrency=concurrency
            ),
            work,
        )
    if on_engine is not None:
        on_engine(runner)
    try:
        return run_tasks(runner, ts, candidate, sorted(ts.tasks), put=put, on_done=on_done)
    finally:
        runner.close()
