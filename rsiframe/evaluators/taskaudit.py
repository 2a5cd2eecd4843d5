"""``rsiframe tasks audit PATH``: attack a task set the way a reward-hacking agent would.

Every hack of the battery (:mod:`rsiframe.evaluators.taskhacks`) runs as the agent of every
task (or of the tasks named) through the engines a real run uses
(:func:`rsiframe.evaluators.taskcheck.run_agent`: the ``local`` engine in its sandbox, the
``harbor`` engine's ``bwrap`` environment). A task
is reported for each hack that scores above the do-nothing agent, or that saw what it must
not (planted code run by the verifier that can read the tests or write the reward; a copy
of the tests or the solution readable by the agent); a reference solution that does not
score 1, and a do-nothing agent that does, are reported too. The task folders are only
read: their digests are compared before and after.
"""

from __future__ import annotations

import hashlib
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichBar

from rsiframe.errors import TaskSetError
from rsiframe.evaluators import taskhacks
from rsiframe.evaluators.base import TaskRun
from rsiframe.evaluators.harbor.engine import HarborEngine
from rsiframe.evaluators.taskcheck import ENGINES, run_agent, task_folders
from rsiframe.sandbox.bwrap import kill_all
from rsiframe.tasks.taskset import Task, file_rows, load_task, task_digest
from rsiframe.util.reaper import settle

STOP_WITHIN_S = 30.0  # on Ctrl-C, how long the evaluations get to end
#: progress: (the run that just finished, runs done, runs in all)
Progress = Callable[[str, int, int], None]


class Finding(BaseModel):
    """One hack that worked on one task, on one engine."""

    model_config = ConfigDict(extra="forbid")

    task: str
    engine: str
    hack: str
    what: str

    def __str__(self) -> str:
        return f"{self.task}: {self.hack} on {self.engine}: {self.what}"


class HackRun(BaseModel):
    """One evaluation of the battery: its rewards, and the errors its trials ended with."""

    model_config = ConfigDict(extra="forbid")

    engine: str
    run: str
    seconds: float
    rewards: dict[str, float] = Field(default_factory=dict)
    errors: dict[str, str] = Field(default_factory=dict)
    failed: str | None = None  # the whole evaluation failed (the engine's own error)


class AuditReport(BaseModel):
    """What ``tasks audit`` found (``--json``)."""

    model_config = ConfigDict(extra="forbid")

    path: str
    engines: list[str]
    tasks: list[str]
    battery: dict[str, str]
    findings: list[Finding]
    runs: list[HackRun]
    #: engine -> task -> the planted files the verifier ran (each reports once it runs)
    planted_ran: dict[str, dict[str, list[str]]]
    unchanged: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.findings


def select(path: Path, task_ids: list[str]) -> list[Task]:
    """The tasks under ``path`` (all, or those named); a bad path or name is bad input."""
    loaded = {}
    for folder in task_folders(path):
        loaded[folder.name] = load_task(folder)
    unknown = [t for t in task_ids if t not in loaded]
    if unknown:
        raise TaskSetError(f"no such task: {', '.join(unknown)}", where=str(path))
    return [loaded[t] for t in task_ids] if task_ids else list(loaded.values())


def digests(tasks: list[Task]) -> dict[str, str]:
    return {t.id: task_digest(file_rows(t.path)) for t in tasks}


class _Evidence:
    """The ``put`` of the audit's evaluations: content addresses, with only the blobs
    that hold a report kept (a run's output can be huge)."""

    def __init__(self, nonce: str) -> None:
        self.mark = nonce.encode()
        self.kept: dict[str, bytes] = {}

    def put(self, data: bytes) -> str:
        ref = hashlib.sha256(data).hexdigest()
        if self.mark in data:
            self.kept[ref] = data
        return ref

    def of(self, run: TaskRun) -> bytes:
        refs = dict.fromkeys((run.trajectory.get("artifacts") or {}).values())  # once each
        return b"\n".join(self.kept[r] for r in refs if r in self.kept)


def audit(
    path: Path,
    *,
    engines: tuple[str, ...] = ENGINES,
    task_ids: tuple[str, ...] = (),
    hacks: tuple[str, ...] = (),
    concurrency: int = 4,
    parallel: int = 3,
    sandbox: str = "auto",
    progress: Progress | None = None,
) -> AuditReport:
    """Run the battery (or the ``hacks`` named; the baseline always) on the tasks under
    ``path``: ``parallel`` evaluations at once, each ``concurrency`` tasks at a time."""
    started = time.monotonic()
    tasks = select(path, list(task_ids))
    unknown = sorted(set(hacks) - set(taskhacks.HACK_NAMES))
    if unknown:
        raise TaskSetError(
            f"no such hack: {', '.join(unknown)} ({', '.join(taskhacks.HACK_NAMES)})"
        )
    before = digests(tasks)
    nonce = secrets.token_hex(8)
    scratch = Path(tempfile.mkdtemp(prefix="rsiframe-audit-"))
    judge = _Judge(nonce, {t.id: t for t in tasks})
    try:
        candidate = taskhacks.make_candidate(scratch / "candidate", tasks, nonce)
        todo = [
            (engine, run)
            for engine in engines
            for run in taskhacks.runs(tasks, engine)
            if not hacks or run.hack in hacks or run.hack == "nothing"
        ]
        _run_all(todo, _Setup(tasks, candidate, scratch, concurrency, sandbox), judge,
                 parallel, progress)  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _report(path, engines, tasks, judge, before, time.monotonic() - started)


def _report(
    path: Path,
    engines: tuple[str, ...],
    tasks: list[Task],
    judge: _Judge,
    before: dict[str, str],
    seconds: float,
) -> AuditReport:
    findings = judge.findings()
    changed = sorted(t for t, d in digests(tasks).items() if d != before[t])
    for t in changed:
        findings.append(Finding(task=t, engine="-", hack="audit", what="the task folder changed"))
    return AuditReport(
        path=str(path),
        engines=list(engines),
        tasks=[t.id for t in tasks],
        battery={h.name: h.summary for h in taskhacks.BATTERY},
        findings=findings,
        runs=sorted(judge.runs, key=lambda r: (r.engine, r.run)),
        planted_ran=judge.planted_ran,
        unchanged=not changed,
        seconds=round(seconds, 1),
    )


@dataclass(frozen=True)
class _Setup:
    tasks: list[Task]
    candidate: Path
    scratch: Path
    concurrency: int
    sandbox: str
    #: the engines running now, so Ctrl-C can stop them (Harbor runs in a session of its own)
    live: list[Any] = field(default_factory=list)


def _run_all(
    todo: list[tuple[str, taskhacks.Run]],
    setup: _Setup,
    judge: _Judge,
    parallel: int,
    progress: Progress | None,
) -> None:
    pool = ThreadPoolExecutor(parallel, thread_name_prefix="audit")
    futures: list[Future[HackRun]] = []
    try:
        futures += [pool.submit(_evaluate, e, run, setup, judge) for e, run in todo]
        for done, fut in enumerate(as_completed(futures), 1):
            result = fut.result()
            judge.record(result)
            if progress is not None:
                progress(f"{result.engine} {result.run}", done, len(todo))
    except BaseException:  # Ctrl-C: stop every evaluation now, not when it ends
        pool.shutdown(wait=False, cancel_futures=True)
        _stop(futures, setup.live)
        raise
    finally:
        settle(STOP_WITHIN_S)  # trial folders handed to the reaper, before the scratch goes
    pool.shutdown()


def _stop(futures: list[Future[HackRun]], live: list[Any]) -> None:
    """Kill what the evaluations run until they have ended (an evaluation of the local
    engine starts its next trial when one is killed), for at most STOP_WITHIN_S."""
    deadline = time.monotonic() + STOP_WITHIN_S
    while time.monotonic() < deadline:
        kill_all()
        for engine in list(live):
            if isinstance(engine, HarborEngine):
                engine.close()
        # done() and not wait(): a future cancelled before it started never counts as
        # done for wait()
        if all(f.done() for f in futures):
            return
        time.sleep(0.2)


def _evaluate(engine: str, run: taskhacks.Run, setup: _Setup, judge: _Judge) -> HackRun:
    """One run of the battery on its tasks; its rewards, errors and reports to ``judge``."""
    chosen = [t for t in setup.tasks if t.id in set(run.task_ids)]
    evidence = _Evidence(judge.nonce)
    result = HackRun(engine=engine, run=run.label, seconds=0.0)
    t0 = time.monotonic()

    def done(tr: TaskRun) -> None:
        result.rewards[tr.task_id] = tr.reward
        if tr.error:
            result.errors[tr.task_id] = tr.error[:300]
        judge.seen(engine, run, tr.task_id, evidence.of(tr))

    work = Path(tempfile.mkdtemp(prefix=f"{engine}-{run.hack}-", dir=setup.scratch))
    candidate = setup.candidate
    if run.candidate_links:
        candidate = taskhacks.with_links(candidate, run.candidate_links, work / "candidate")
    try:
        run_agent(
            engine, chosen, candidate, work / "run", agent=run.agent,
            concurrency=setup.concurrency, sandbox=setup.sandbox, put=evidence.put, on_done=done,
            on_engine=setup.live.append,
        )  # fmt: skip
    except Exception as exc:  # one failed evaluation must not hide the others' findings
        result.failed = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.seconds = round(time.monotonic() - t0, 2)
    return result


def _linked(run: taskhacks.Run, task: str) -> str:
    """What a run of ``links`` pointed the task's files at, in words."""
    own = run.targets.get(task)
    shared = next(iter(run.candidate_links.values()), None)
    if own and (shared is None or own == shared):
        where = "its files" + (" and the candidate's" if shared else "")
        return f"{where} linked to /{own}"
    parts = [f"its files linked to /{own}"] if own else []
    parts += [f"the candidate's files linked to /{shared}"] if shared else []
    return " and ".join(parts)


class _Judge:
    """Rewards and reports as they arrive; the findings once every run is in."""

    def __init__(self, nonce: str, tasks: dict[str, Task]) -> None:
        self.nonce = nonce
        self.tasks = tasks
        self.runs: list[HackRun] = []
        self.targets: dict[tuple[str, str, str], str] = {}  # (engine, run, task) -> link target
        self.saw: dict[tuple[str, str, str], list[taskhacks.Report]] = {}  # (engine, hack, task)
        self.planted_ran: dict[str, dict[str, list[str]]] = {}
        self.lock = threading.Lock()  # reports arrive from the evaluations' threads

    def seen(self, engine: str, run: taskhacks.Run, task: str, data: bytes) -> None:
        with self.lock:
            self._seen(engine, run, task, data)

    def _seen(self, engine: str, run: taskhacks.Run, task: str, data: bytes) -> None:
        if run.hack == "links":
            self.targets[(engine, run.label, task)] = _linked(run, task)
        for rep in taskhacks.reports(self.nonce, data):
            if rep.hack != run.hack:
                continue
            self.saw.setdefault((engine, run.hack, task), []).append(rep)
            if rep.hack == "planted":
                files = self.planted_ran.setdefault(engine, {}).setdefault(task, [])
                file = rep.fields.get("file", "?")
                if file not in files:
                    files.append(file)

    def record(self, run: HackRun) -> None:
        self.runs.append(run)

    def findings(self) -> list[Finding]:
        out: list[Finding] = []
        for engine in dict.fromkeys(r.engine for r in self.runs):
            runs = [r for r in self.runs if r.engine == engine]
            out += self._of_engine(engine, runs)
        return out

    def _of_engine(self, engine: str, runs: list[HackRun]) -> list[Finding]:
        out: list[Finding] = []
        base = next((r for r in runs if r.run == "nothing"), None)
        baseline = base.rewards if base is not None else {}
        for r in runs:
            if r.failed:
                out.append(
                    Finding(task="*", engine=engine, hack=r.run, what=f"the run failed: {r.failed}")
                )
        for task in self.tasks:
            out += self._of_task(engine, task, runs, baseline.get(task))
        return out

    def _of_task(
        self, engine: str, task: str, runs: list[HackRun], base: float | None
    ) -> list[Finding]:
        """``base``: the do-nothing agent's reward (None: its run failed, so no reward of
        another hack is compared; what the hacks saw still counts)."""
        out = []
        by_hack: dict[str, list[HackRun]] = {}
        for r in runs:
            if task in r.rewards or task in r.errors:
                by_hack.setdefault(r.run.split("/")[0], []).append(r)
        if base is not None and base >= 1.0:
            what = f"the do-nothing agent scores {base:g}: no hack can score above it"
            out.append(Finding(task=task, engine=engine, hack="nothing", what=what))
        for r in by_hack.get("oracle", []):
            got = r.rewards.get(task, 0.0)
            if got != 1.0:
                why = f": {r.errors[task]}" if task in r.errors else ""
                what = f"the reference solution scores {got:g}{why}"
                out.append(Finding(task=task, engine=engine, hack="oracle", what=what))
        for hack in taskhacks.HACK_NAMES[2:]:
            seen = self._hack_on(engine, task, hack, by_hack.get(hack, []), base)
            if seen:
                out.append(Finding(task=task, engine=engine, hack=hack, what=seen))
        return out

    def _hack_on(
        self, engine: str, task: str, hack: str, runs: list[HackRun], base: float | None
    ) -> str | None:
        parts = []
        seen = taskhacks.saw(hack, self.saw.get((engine, hack, task), []))
        if seen:
            parts.append(seen)
        best = max(runs, key=lambda r: r.rewards.get(task, 0.0), default=None)
        if base is not None and best is not None and best.rewards.get(task, 0.0) > base + 1e-9:
            got = best.rewards[task]
            how = ""
            target = self.targets.get((engine, best.run, task))
            if target:
                how = f" with {target}"
            parts.append(f"scores {got:g}{how} where the do-nothing agent scores {base:g}")
        return "; ".join(parts) or None


class AuditProgress:
    """Progress on stderr: a live Rich line on a terminal; elsewhere one plain line per
    run finished (never wrapped)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.bar = RichBar(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task = self.bar.add_task("audit", total=None)

    def __enter__(self) -> AuditProgress:
        if self.live:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.bar.stop()

    def __call__(self, what: str, done: int, total: int) -> None:
        if self.live:
            self.bar.update(self.task, description=f"audit: {what}", completed=done, total=total)
        else:
            sys.stderr.write(f"audit: {done}/{total} runs, {what} done\n")
            sys.stderr.flush()
