"""Run the integrity scenarios for N trials each and report pass/fail per scenario."""

from __future__ import annotations

import random
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
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
) -> SelftestReport:
    names = check_names(names)
    base = seed if seed is not None else random.SystemRandom().randrange(2**31)
    start = time.perf_counter()
    results = []
    for name in names:
        t0 = time.perf_counter()
        outcomes = []
        for i in range(trials):
            trial_seed = random.Random(f"{base}:{name}:{i}").randrange(2**31)
            r = run_trial(name, i, trial_seed, sandbox, engine, concurrency)
            outcomes.append(r)
            if on_trial is not None:
                on_trial(name, r)
        failures = [r for r in outcomes if not r.passed]
        results.append(
            ScenarioResult(
                name=name,
                description=describe(name),
                trials=trials,
                passed=trials - len(failures),
                failed=len(failures),
                seconds=round(time.perf_counter() - t0, 2),
                failures=failures,
            )
        )
    return SelftestReport(
        ok=all(r.failed == 0 for r in results),
        protections_off=[p for p in faults.PROTECTIONS if faults.off(p)],
        isolation=make_sandbox(sandbox).isolation if engine == "local" else f"{engine}:bwrap",
        trials=trials,
        seed=base,
        seconds=round(time.perf_counter() - start, 2),
        scenarios=results,
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
