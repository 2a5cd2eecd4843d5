"""What every self-test scenario module shares: a trial (its experiment, its random
source), the scenario type, and the judging helpers (a run is sound; a command answered in
one line; an attack run)."""

from __future__ import annotations

import random
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe.archive.loader import load_run
from rsiframe.archive.log import get_json
from rsiframe.audit.verify import verify
from rsiframe.errors import RsiError
from rsiframe.selftest.experiment import Experiment, build
from rsiframe.selftest.experiment import truth_problems as truth

KILLED = -signal.SIGKILL


@dataclass
class Trial:
    index: int
    rng: random.Random
    root: Path
    sandbox: str = "auto"  # the evaluator's sandbox in the experiment's recipe
    engine: str = "local"  # the experiment's evaluator engine (harbor: the bwrap environment)
    concurrency: dict[str, Any] | None = None  # the recipe's candidates in flight

    def experiment(self, **kw: Any) -> Experiment:
        return build(
            self.root / "exp",
            seed=self.rng.randrange(10_000),
            sandbox=self.sandbox,
            engine=self.engine,
            concurrency=self.concurrency,
            **kw,
        )


Scenario = Callable[[Trial], list[str]]


def one_line(res: subprocess.CompletedProcess[str], what: str) -> list[str]:
    lines = res.stderr.strip().splitlines()
    if "Traceback" in res.stderr:
        where = [x.strip() for x in lines if x.strip().startswith("File ")][-1:]
        return [f"{what}: traceback: {lines[-1] if lines else ''} ({' '.join(where)})"]
    return []


def check_exit(res: subprocess.CompletedProcess[str], what: str) -> tuple[list[str], bool]:
    """``one_line``'s problems, plus the exit line unless ``res`` exited 0; and whether it did."""
    problems = one_line(res, what)
    if res.returncode != 0:
        return [*problems, f"{what} exit {res.returncode}: {res.stderr.strip()[-300:]}"], False
    return problems, True


def sound(exp: Experiment, *, state: str | tuple[str, ...] = "finished") -> list[str]:
    """The run is valid (every verify check, the champion reproduced) and truthful."""
    problems = []
    try:
        loaded = load_run(exp.run_dir)
    except RsiError as exc:
        return [f"status: {exc}"]
    states = (state,) if isinstance(state, str) else state
    if loaded.run_state() not in states:
        reason = (loaded.state.terminal or {}).get("reason")
        problems.append(f"run is {loaded.run_state()} ({reason}), expected {'/'.join(states)}")
    report = verify(exp.run_dir, reproduce=True)
    problems += [f"verify: {p}" for p in report.problems]
    problems += truth(loaded)
    return problems


def attack(t: Trial, params: dict[str, Any]) -> tuple[Experiment, subprocess.CompletedProcess]:
    victims = t.rng.sample(["c0001", "c0002", "c0003"], t.rng.randint(1, 2))
    exp = t.experiment(generations=2, children=2, params={"victims": victims, "level": 0, **params})
    return exp, exp.run()


@dataclass(frozen=True)
class CertifiedTask:
    """One task of a certified evaluation in a run: where it ran, and its trajectory."""

    candidate: str
    split: str
    task: str
    trajectory: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.candidate}/{self.split}/{self.task}"


def certified_tasks(exp: Experiment) -> Iterator[CertifiedTask]:
    """Every task of every certified evaluation in the experiment's run, in archive order."""
    loaded = load_run(exp.run_dir)
    for c in loaded.state.candidates.values():
        for tries in c.attempts.values():
            for a in tries:
                if a.record is None:
                    continue
                for task, digest in a.record.predicate.trajectories.items():
                    yield CertifiedTask(c.id, a.split, task, get_json(exp.run_dir, digest))
