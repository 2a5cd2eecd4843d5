"""What ``status``, ``verify`` and the end-of-run summary say: pydantic models and tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from rsiframe.archive import get_artifact, get_json
from rsiframe.budget import BudgetGuard
from rsiframe.candidates import CandidateRepo
from rsiframe.errors import ArchiveCorrupt, RsiError
from rsiframe.loader import LoadedRun, load_run
from rsiframe.recipe import Budget
from rsiframe.state import CANDIDATE_STATES, Candidate, RunState
from rsiframe.tasks import TaskLock


class Scores(BaseModel):
    train: float | None
    gate: float | None
    sealed: float | None


class CandidateStatus(BaseModel):
    id: str
    parent: str | None
    generation: int
    state: str
    scores: Scores
    description: str
    decision: str | None
    reasons: list[str]
    commit: str | None


class StatusReport(BaseModel):
    run_id: str
    name: str
    path: str
    state: str
    reason: str | None
    seed: str | None
    champion: str | None
    budget: dict[str, Any]
    counts: dict[str, int]
    candidates: list[CandidateStatus]
    notes: list[str]


class VerifyReport(BaseModel):
    ok: bool
    records: int
    problems: list[str]


def scores_of(c: Candidate) -> Scores:
    return Scores(train=c.score("train"), gate=c.score("gate"), sealed=c.score("sealed"))


def _reasons(c: Candidate) -> list[str]:
    if c.rejected:
        return [f"{c.rejected.get('stage')}: {r}" for r in c.rejected.get("reasons", [])]
    if c.abandoned:
        return [c.abandoned]
    errors = [a.error for tries in c.attempts.values() for a in tries[-1:] if a.error]
    return errors


def status_of(loaded: LoadedRun) -> StatusReport:
    st = loaded.state
    lock = loaded.paths.read_json(loaded.paths.recipe_lock)
    guard = BudgetGuard(Budget.model_validate(lock["resolved"].get("budget", {})))
    counts = dict.fromkeys(CANDIDATE_STATES, 0)
    rows = []
    for c in st.candidates.values():
        counts[c.state] += 1
        rows.append(
            CandidateStatus(
                id=c.id,
                parent=c.parent,
                generation=c.generation,
                state=c.state,
                scores=scores_of(c),
                description=c.description,
                decision=c.decision["reason"] if c.decision else None,
                reasons=_reasons(c),
                commit=c.commit,
            )
        )
    champ = st.champion()
    seed = st.seed
    return StatusReport(
        run_id=st.run_id,
        name=st.name,
        path=str(loaded.paths.root),
        state=loaded.run_state(),
        reason=(st.terminal or {}).get("reason"),
        seed=seed.id if seed else None,
        champion=champ.id if champ else None,
        budget=guard.report(st),
        counts=counts,
        candidates=rows,
        notes=loaded.notes + st.problems,
    )


def verify(root: Path) -> VerifyReport:
    """Every signature, the hash chain, the locks, commits and evidence of every record."""
    try:
        loaded = load_run(root, strict=False, every_signature=True)
    except RsiError as exc:
        if exc.exit_code == 2 and "run folder" in exc.message:
            raise
        return VerifyReport(ok=False, records=0, problems=[str(exc)])
    st = loaded.state
    problems = list(st.problems)
    paths = loaded.paths
    try:
        lock = paths.read_json(paths.recipe_lock)
        if lock.get("digest") != st.recipe_digest:
            problems.append("recipe.lock.json digest differs from the run's recipe digest")
        task_lock = TaskLock.from_json(paths.read_json(paths.tasks_lock))
        if task_lock.fingerprint != st.taskset_fingerprint:
            problems.append("tasks.lock.json differs from the run's task-set fingerprint")
        evaluator = paths.read_json(paths.evaluator_lock)
        if evaluator.get("fingerprint") != st.evaluator_fingerprint:
            problems.append("evaluator.lock.json differs from the run's evaluator fingerprint")
    except RsiError as exc:
        problems.append(str(exc))
    repo = CandidateRepo(paths.repo)
    try:
        for c in st.candidates.values():
            if c.commit is None:
                continue
            if not repo.has_commit(c.commit):
                problems.append(f"{c.id}: commit {c.commit[:12]} is missing from repo.git")
            elif repo.tree_of(c.commit) != c.tree:
                problems.append(f"{c.id}: commit {c.commit[:12]} does not have the recorded tree")
            if c.state == "admitted" and c.record("gate") is None:
                problems.append(f"{c.id}: admitted without a verified gate record")
            problems += _evidence_problems(paths.root, c)
    finally:
        repo.close()
    return VerifyReport(ok=not problems, records=st.records, problems=problems)


def _evidence_problems(root: Path, c: Candidate) -> list[str]:
    """Every trajectory a certificate names, and every log it names, exists unaltered."""
    problems = []
    for tries in c.attempts.values():
        for a in tries:
            if a.record is None:
                continue
            for task, digest in a.record.predicate.trajectories.items():
                try:
                    traj = get_json(root, digest)
                    for ref in traj.get("artifacts", {}).values():
                        get_artifact(root, ref)
                except (ArchiveCorrupt, ValueError) as exc:
                    problems.append(f"{c.id}/{a.split}#{a.attempt} {task}: {exc.args[0]}")
    return problems


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def summary_table(report: StatusReport) -> Table:
    table = Table(title=f"{report.name}: {report.state}", title_justify="left")
    table.add_column("")
    table.add_column("candidate")
    for split in ("train", "gate", "sealed"):
        table.add_column(split, justify="right")
    by_id = {c.id: c for c in report.candidates}
    for label, cid in (("seed", report.seed), ("champion", report.champion)):
        if cid is None:
            continue
        s = by_id[cid].scores
        table.add_row(label, cid, _fmt(s.train), _fmt(s.gate), _fmt(s.sealed))
    return table


BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None], width: int = 100) -> str:
    """Scores in [0, 1] as block characters (a blank where there is no score)."""
    out = []
    for v in values[-width:]:
        if v is None:
            out.append(" ")
        else:
            out.append(BLOCKS[min(len(BLOCKS) - 1, max(0, round(v * (len(BLOCKS) - 1))))])
    return "".join(out)


def score_lines(report: StatusReport) -> list[str]:
    """Gate score per candidate, and the best admitted score so far, as sparklines."""
    gates = [c.scores.gate for c in report.candidates]
    best: list[float | None] = []
    top: float | None = None
    for c in report.candidates:
        if c.state == "admitted" and c.scores.gate is not None:
            top = c.scores.gate if top is None else max(top, c.scores.gate)
        best.append(top)
    if not any(g is not None for g in gates):
        return []
    return [f"gate per candidate  |{sparkline(gates)}|", f"best admitted gate  |{sparkline(best)}|"]


def print_summary(report: StatusReport, console: Console) -> None:
    console.print(summary_table(report))
    for line in score_lines(report):
        console.print(line, highlight=False)
    counts = ", ".join(f"{n} {s}" for s, n in report.counts.items() if n)
    used = report.budget["used"]
    console.print(
        f"{len(report.candidates)} candidates ({counts}); {used['evaluations']} evaluations; "
        f"{used['wall_seconds']:.0f} s"
    )
    if report.reason:
        console.print(f"stopped: {report.reason}")
    console.print(f"details: rsiframe status {report.path}")
    for note in report.notes:
        console.print(f"note: {note}")


def candidate_table(report: StatusReport) -> Table:
    table = Table(title=f"{report.name} ({report.run_id})", title_justify="left")
    for col in ("id", "parent", "gen", "state", "train", "gate", "sealed", "change / reason"):
        table.add_column(
            col, justify="right" if col in ("train", "gate", "sealed") else "left", overflow="fold"
        )
    for c in report.candidates:
        why = (
            c.description
            if c.state in ("admitted", "declined") or not c.reasons
            else ("; ".join(c.reasons))
        )
        table.add_row(
            c.id,
            c.parent or "",
            str(c.generation),
            c.state,
            _fmt(c.scores.train),
            _fmt(c.scores.gate),
            _fmt(c.scores.sealed),
            why[:120],
        )
    return table


def state_counts(st: RunState) -> dict[str, int]:
    counts = dict.fromkeys(CANDIDATE_STATES, 0)
    for c in st.candidates.values():
        counts[c.state] += 1
    return counts
