"""Run the integrity scenarios for N trials each and report pass/fail per scenario."""

from __future__ import annotations

import multiprocessing
import random
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.console import JustifyMethod
from rich.table import Table

from rsiframe.errors import RsiError
from rsiframe.sandbox.bwrap import make_sandbox
from rsiframe.selftest.catalog import SCENARIOS
from rsiframe.selftest.common import Trial
from rsiframe.util import faults

#: trials per scenario by default: the whole self-test stays within a few minutes on 2 cores
DEFAULT_TRIALS = 2


class TrialResult(BaseModel):
    trial: int
    seed: int
    passed: bool
    seconds: float
    problems: list[str]


class ScenarioResult(BaseModel):
    name: str
    description: str
    trials: int
    passed: int
    failed: int
    seconds: float
    failures: list[TrialResult]


class SelftestReport(BaseModel):
    ok: bool
    isolation: str
    #: protections switched off with ``RSIFRAME_FAULT=off:NAME`` (the proof that a scenario
    #: fails without its fix); empty in every real self-test
    protections_off: list[str] = []
    trials: int
    seed: int
    seconds: float
    scenarios: list[ScenarioResult]


def describe(name: str) -> str:
    doc = (SCENARIOS[name].__doc__ or "").strip()
    return doc.splitlines()[0] if doc else name


def check_names(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise RsiError(
            f"unknown scenario {unknown[0]!r}; known: {', '.join(SCENARIOS)}", where="--scenario"
        )
    return names or list(SCENARIOS)


def run_trial(
    name: str,
    index: int,
    seed: int,
    sandbox: str = "auto",
    engine: str = "local",
    concurrency: dict[str, Any] | None = None,
) -> TrialResult:
    """One independent trial in its own temp folder (removed afterwards)."""
    root = Path(tempfile.mkdtemp(prefix=f"rsiframe-selftest-{name}-"))
    t0 = time.perf_counter()
    try:
        trial = Trial(index, random.Random(seed), root, sandbox, engine, concurrency)
        problems = SCENARIOS[name](trial)
    except Exception as exc:  # a crash of the scenario itself is a failed trial, with its cause
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        problems = [f"{type(exc).__name__}: {exc} (at {Path(tb.filename).name}:{tb.lineno})"]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return TrialResult(
        trial=index,
        seed=seed,
        passed=not problems,
        seconds=round(time.perf_counter() - t0, 2),
        problems=problems,
    )


def run_selftest(
    trials: int,
    names: list[str],
    *,
    seed: int | None = None,
    sandbox: str = "auto",
    engine: str = "local",
    concurrency: dict[str, Any] | None = None,
    on_trial: Callable[[str, TrialResult], None] | None = None,
    jobs: int = 1,
) -> SelftestReport:
    """Every scenario's trials, ``jobs`` at a time (each in a process of its own when
    ``jobs`` > 1: scenarios set environment variables and fault switches)."""
    names = check_names(names)
    base = seed if seed is not None else random.SystemRandom().randrange(2**31)
    start = time.perf_counter()
    work = [
        (name, i, trial_seed(base, name, i), sandbox, engine, concurrency)
        for name in names
        for i in range(trials)
    ]
    outcomes: dict[str, list[TrialResult]] = {name: [] for name in names}
    for name, r in _trials(work, jobs):
        outcomes[name].append(r)
        if on_trial is not None:
            on_trial(name, r)
    results = [_scenario(name, sorted(outcomes[name], key=lambda r: r.trial)) for name in names]
    return SelftestReport(
        ok=all(r.failed == 0 for r in results),
        protections_off=[p for p in faults.PROTECTIONS if faults.off(p)],
        isolation=make_sandbox(sandbox).isolation if engine == "local" else f"{engine}:bwrap",
        trials=trials,
        seed=base,
        seconds=round(time.perf_counter() - start, 2),
        scenarios=results,
    )


def trial_seed(base: int, name: str, index: int) -> int:
    """Trial ``index`` of scenario ``name``'s seed: the same whatever runs at a time."""
    return random.Random(f"{base}:{name}:{index}").randrange(2**31)


def _trials(work: list[tuple[Any, ...]], jobs: int) -> Iterator[tuple[str, TrialResult]]:
    """(scenario, result) for each trial of ``work`` as it ends."""
    if jobs <= 1:
        for args in work:
            yield args[0], run_trial(*args)
        return
    context = multiprocessing.get_context("spawn")  # no lock or thread of this process inherited
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        running = {pool.submit(run_trial, *args): args[0] for args in work}
        for done in as_completed(running):
            yield running[done], done.result()


def _scenario(name: str, outcomes: list[TrialResult]) -> ScenarioResult:
    failures = [r for r in outcomes if not r.passed]
    return ScenarioResult(
        name=name,
        description=describe(name),
        trials=len(outcomes),
        passed=len(outcomes) - len(failures),
        failed=len(failures),
        seconds=round(sum(r.seconds for r in outcomes), 2),
        failures=failures,
    )


def table(report: SelftestReport) -> Table:
    t = Table(
        title=f"integrity self-test: {report.trials} trial(s) per scenario, "
        f"isolation {report.isolation}, seed {report.seed}"
        + "".join(f"; PROTECTION OFF: {p}" for p in report.protections_off),
        title_justify="left",
    )
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("scenario", "left"),
        ("result", "left"),
        ("passed", "right"),
        ("s/trial", "right"),
        ("what it does", "left"),
    )
    for col, justify in columns:
        t.add_column(col, justify=justify, overflow="fold")
    for s in report.scenarios:
        verdict = "[green]pass[/]" if s.failed == 0 else "[bold red]FAIL[/]"
        per = s.seconds / max(1, s.trials)
        t.add_row(s.name, verdict, f"{s.passed}/{s.trials}", f"{per:.1f}", s.description)
    return t


def failure_lines(report: SelftestReport) -> list[str]:
    """Each failed trial's problems, and how to run it again: the same ``--seed`` gives each
    trial of a scenario the same seed whatever else runs beside it."""
    lines = []
    for s in report.scenarios:
        for r in s.failures:
            lines.append(f"{s.name} #{r.trial} failed:")
            lines += [f"    {p}" for p in r.problems[:5]]
    if lines:
        lines.append(f"again: the same options with --seed {report.seed} --scenario NAME")
    return lines
