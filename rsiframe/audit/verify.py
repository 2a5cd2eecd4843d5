"""``rsiframe verify``: check a run folder with nothing but the folder and its public key.

Each check has a name and reports on its own, so a third party can see what
was established and what was not:

``pubkey``        pubkey.pem is an Ed25519 key, the one ``run_started`` names (and the one
                  given with ``--key``, obtained out of band, when given)
``chain``         every event parses, sequence numbers run 0..n, each links to the hash of
                  the one before (a torn last line is a crash, reported as a note)
``signatures``    every event is signed by the run's key
``state``         the events fold into a run state (known types, well-formed data)
``certificates``  every certificate verifies and binds this run, candidate commit and tree,
                  parent, recipe, evaluator and task set
``locks``         recipe.lock.json hashes to the run's recipe digest and matches
                  recipe.yaml, its operator identities are those run_started signed, and
                  every certificate names the locked gate code; tasks.lock.json hashes to
                  the run's task-set fingerprint; evaluator.lock.json names the run's
                  evaluator and the recipe's config
``operators``     (drift) the operators' code on disk is what the lock holds
``tasks``         (drift) the task set on disk is what the task lock holds (skipped when
                  the task set is not on this machine)
``commits``       each candidate's commit is in repo.git with its recorded tree, its git
                  parent is its parent candidate's commit, and its ref points at it
``admitted``      every admitted candidate has a verified record for each required split,
                  and every child descends from an admitted candidate
``evidence``      every trajectory and log a certificate names exists, unaltered
``head``          (``--head N:HASH``) the chain still holds, as its event N-1, the event
                  whose hash was written down: nothing was cut off or rewritten since
``reproduce``     (``--reproduce``) the champion, re-evaluated from a fresh export in a fresh
                  sandbox, gets the rewards its certificates state

Each check's detail is what it found: a count when it passed, its first problem when not.
``operators`` and ``tasks`` look at files on disk, not at the archive: a difference there is
*drift* (the run's evidence still verifies; resume refuses until the files are back), told
apart from a broken archive in the verdict (``ok``, ``drift``, ``failed``) and the exit code
(:data:`EXIT_DRIFT`). Nothing here writes into the run folder, and no private key is needed.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel

from rsiframe import yamlsafe
from rsiframe.archive.loader import unsigned_events
from rsiframe.archive.log import get_artifact, get_json, put_artifact, read_events
from rsiframe.archive.runfolder import RunPaths
from rsiframe.archive.state import Candidate, RunState, fold
from rsiframe.audit.drift import operator_drift, task_drift
from rsiframe.certs.signing import BadSignature, RecordVerifier
from rsiframe.dth.hostfacts import describe, differing
from rsiframe.errors import ArchiveCorrupt, LockMismatch, RsiError, RunFolderError
from rsiframe.evaluators.base import EvaluationOutput
from rsiframe.evaluators.registry import (
    evaluator_changes,
    evaluator_parts,
    make_evaluator,
    run_tasks,
)
from rsiframe.repo.candidates import CANDIDATE_REFS, CandidateRepo, ExportMismatch
from rsiframe.slots import identity as opidentity
from rsiframe.tasks.taskset import SPLITS, TaskLock, TaskSet, tasks_by_split
from rsiframe.util.digest import sha256_json

#: the checks of files on disk against the run's locks: their problems are drift
DRIFT_CHECKS = ("operators", "tasks")
CHECKS = (
    "pubkey",
    "chain",
    "signatures",
    "state",
    "certificates",
    "locks",
    "operators",
    "tasks",
    "commits",
    "admitted",
    "evidence",
)


class Check(BaseModel):
    name: str
    #: drift: files on disk differ from the run's locks (a drift check's problems)
    status: Literal["ok", "failed", "drift", "skipped"]
    #: what the check found: a count when it passed, its first problem when not
    detail: str
    problems: list[str] = []


class TaskDeviation(BaseModel):
    split: str
    task: str
    recorded: float
    reproduced: float
    error: str | None = None


class Reproduction(BaseModel):
    candidate: str | None
    splits: list[str]
    tasks: int
    tolerance: float
    max_deviation: float
    deviations: list[TaskDeviation]
    isolation: str | None
    notes: list[str]
    build: str | None = None  # D/T/H: "rebuilt" (--rebuild) or "cache" (what the cache held)
    host_differs: list[str] = []  # D/T/H: host facts unlike the record's, when rewards moved


class VerifyReport(BaseModel):
    #: every check passed and nothing drifted
    ok: bool
    #: ok; drift (the archive verifies, files on disk differ from its locks); failed
    verdict: Literal["ok", "drift", "failed"] = "failed"
    path: str
    run_id: str
    keyid: str
    events: int
    records: int
    checks: list[Check]
    problems: list[str]
    notes: list[str]
    reproduce: Reproduction | None = None


class _Checks:
    def __init__(self) -> None:
        self.items: list[Check] = []

    def add(self, name: str, found: str, problems: list[str]) -> bool:
        """One check: ``found`` is what it established when it passed; otherwise its first
        problem is what it found."""
        bad = "drift" if name in DRIFT_CHECKS else "failed"
        detail = found
        if problems:
            more = len(problems) - 1
            detail = problems[0] + (f" (+{more} more)" if more else "")
        self.items.append(
            Check(name=name, status=bad if problems else "ok", detail=detail, problems=problems)
        )
        return not problems

    def skip(self, names: tuple[str, ...], why: str) -> None:
        done = {c.name for c in self.items}
        for n in names:
            if n not in done:
                self.items.append(Check(name=n, status="skipped", detail=why))


def verify(
    root: Path,
    *,
    reproduce: bool = False,
    tolerance: float = 0.0,
    tasks_root: Path | None = None,
    expected_key: bytes | None = None,
    candidate: str | None = None,
    head: str | None = None,
    rebuild: bool = False,
) -> VerifyReport:
    """Run every check on the run folder ``root``; ``reproduce`` adds the re-evaluation
    (``rebuild``: D/T/H models built again in an empty cache instead of read from it),
    ``head`` (``N:HASH``, :func:`archive.chain_head`) the truncation check."""
    wanted = parse_head(head) if head is not None else None
    paths = RunPaths(Path(root).resolve()).check()
    checks = _Checks()
    names = (*CHECKS, *(("head",) if head else ()), *(("reproduce",) if reproduce else ()))
    report = VerifyReport(
        ok=False, path=str(paths.root), run_id="", keyid="", events=0, records=0,
        checks=[], problems=[], notes=[],
    )  # fmt: skip
    verifier = _read_key(paths, checks)
    if verifier is None:
        return _finish(report, checks, names)
    report.keyid = verifier.keyid
    events = _read_chain(paths, checks, verifier, report)
    if events is None:
        return _finish(report, checks, names)
    _key_checks(checks, events, verifier, expected_key)
    checks.add("chain", f"{len(events)} events, each linked to the one before", [])
    if wanted is not None:
        checks.add(
            "head", f"event {wanted[0] - 1} has hash {wanted[1][:16]}", _head(events, *wanted)
        )
    unsigned = unsigned_events(events, verifier, every=True)
    checks.add("signatures", f"{len(events)} events signed by the run's key", unsigned)
    try:
        st = fold(events, verifier)
    except ArchiveCorrupt as exc:
        checks.add("state", "fold of the events", [str(exc)])
        return _finish(report, checks, names)
    report.run_id, report.records = st.run_id, st.records
    _fold_checks(checks, paths, st, events[0].data, tasks_root)
    if reproduce:
        report.reproduce = _reproduce_check(
            checks, paths, st, tolerance=tolerance, tasks_root=tasks_root,
            candidate=candidate, rebuild=rebuild,
        )  # fmt: skip
    return _finish(report, checks, names)


def _finish(report: VerifyReport, checks: _Checks, names: tuple[str, ...]) -> VerifyReport:
    """The report with every check (those not reached: skipped) and its verdict."""
    checks.skip(names, "an earlier check failed")
    report.checks = checks.items
    report.problems = [p for c in checks.items for p in c.problems]
    # a skipped check is either behind a failed one or has nothing on this machine to
    # look at (the task set of a copied run folder)
    statuses = {c.status for c in checks.items}
    report.verdict = "failed" if "failed" in statuses else "drift" if "drift" in statuses else "ok"
    report.ok = report.verdict == "ok"
    return report


def _read_key(paths: RunPaths, checks: _Checks) -> RecordVerifier | None:
    """The run's public key (its match with run_started is checked once the chain is read)."""
    try:
        return RecordVerifier.from_pem(paths.pubkey.read_bytes())
    except (BadSignature, ValueError, OSError) as exc:
        checks.add("pubkey", "pubkey.pem", [f"pubkey.pem is not an Ed25519 public key: {exc}"])
        return None


def _read_chain(
    paths: RunPaths, checks: _Checks, verifier: RecordVerifier, report: VerifyReport
) -> list[Any] | None:
    """The events, linked and beginning with run_started (None: the chain check failed)."""
    try:
        loaded = read_events(paths.root)
        events = loaded.events
        if not events or events[0].type != "run_started":
            raise ArchiveCorrupt("the archive does not begin with run_started")
    except ArchiveCorrupt as exc:
        checks.add("pubkey", f"keyid {verifier.keyid[:16]}", [])
        checks.add("chain", "events.jsonl", [str(exc)])
        return None
    report.events = len(events)
    if loaded.torn:
        report.notes.append(
            f"the last event is torn ({len(loaded.torn)} bytes): a crash mid-append"
        )
    return events


def _key_checks(
    checks: _Checks, events: list[Any], verifier: RecordVerifier, expected_key: bytes | None
) -> None:
    """pubkey.pem is the key run_started names, and the one given with --key."""
    problems = []
    if events[0].data.get("keyid") != verifier.keyid:
        problems.append("run_started names a different key than pubkey.pem")
    if expected_key is not None:
        try:
            expected = RecordVerifier.from_pem(expected_key).keyid
        except (BadSignature, ValueError) as exc:
            raise RunFolderError(f"--key is not an Ed25519 public key: {exc}") from exc
        if expected != verifier.keyid:
            problems.append("pubkey.pem is not the key given with --key")
    detail = f"keyid {verifier.keyid[:16]}" + (" (matches --key)" if expected_key else "")
    checks.add("pubkey", detail, problems)


def _reproduce_check(
    checks: _Checks, paths: RunPaths, st: RunState, *, tolerance: float, **options: Any
) -> Reproduction:
    """The champion re-evaluated (``--reproduce``), as the ``reproduce`` check."""
    rep, problems = reproduce_champion(paths, st, tolerance=tolerance, **options)
    detail = (
        f"{rep.candidate}: {rep.tasks} tasks on {', '.join(rep.splits)}, "
        f"max deviation {rep.max_deviation:g} (tolerance {tolerance:g})"
        if rep.candidate
        else "nothing to reproduce"
    )
    checks.add("reproduce", detail, problems)
    return rep


def _fold_checks(
    checks: _Checks,
    paths: RunPaths,
    st: RunState,
    run_started: dict[str, Any],
    tasks_root: Path | None,
) -> None:
    """The checks on the folded state: certificates, locks, files on disk (drift),
    commits, admitted candidates and evidence."""
    cert_problems = [p for p in st.problems if "certificate" in p]
    other = [p for p in st.problems if p not in cert_problems and "different key" not in p]
    checks.add("state", f"the events fold into {len(st.candidates)} candidates", other)
    checks.add("certificates", f"{st.records} certificates verified and bound", cert_problems)
    checks.add(
        "locks",
        "recipe, operator, task and evaluator locks match the run",
        lock_problems(paths, st) + _operator_lock_problems(paths, st, run_started),
    )
    checks.add("operators", _operators_found(paths), operator_drift(paths))
    drifted, why_not = task_drift(paths, tasks_root)
    if why_not:
        checks.skip(("tasks",), why_not)
    else:
        checks.add("tasks", f"{_task_count(paths)} tasks on disk as locked", drifted)
    commits = sum(1 for c in st.candidates.values() if c.commit is not None)
    checks.add(
        "commits",
        f"{commits} candidate commit(s) with their trees, parents and refs",
        _commit_problems(paths, st),
    )
    checks.add(
        "admitted",
        f"{len(st.admitted())} admitted candidate(s), each with its verified records",
        _admitted_problems(st),
    )
    evidence, files = _evidence(paths, st)
    checks.add("evidence", f"{files} trajectories named by certificates, unaltered", evidence)


# -- the checks -----------------------------------------------------------------------

_HEAD = re.compile(r"^([0-9]+):([0-9a-f]{64})$")


def parse_head(text: str) -> tuple[int, str]:
    """``N:HASH`` as ``run`` and ``status`` print it; bad input is a :class:`RsiError`."""
    m = _HEAD.match(text.strip())
    if m is None or int(m.group(1)) < 1:
        raise RsiError(f"--head {text!r} is not N:HASH (as run and status print it)")
    return int(m.group(1)), m.group(2)


def _head(events: list[Any], count: int, digest: str) -> list[str]:
    if len(events) < count:
        return [
            f"the chain holds {len(events)} events, fewer than the {count} of the recorded "
            "head: it was truncated"
        ]
    if events[count - 1].hash != digest:
        return [f"event {count - 1} is not the recorded head: the chain was rewritten"]
    return []


def lock_problems(paths: RunPaths, st: RunState) -> list[str]:
    """The recipe, evaluator and task locks against the run and each other; read-only,
    also shown by `status`."""
    problems, resolved = _recipe_lock_problems(paths, st)
    if resolved is not None:  # the evaluator lock is checked against the locked recipe
        problems += _evaluator_lock_problems(paths, st, resolved.get("evaluator", {}))
    return problems + _task_lock_problems(paths, st)


def _recipe_lock_problems(paths: RunPaths, st: RunState) -> tuple[list[str], dict[str, Any] | None]:
    """recipe.lock.json against the run and recipe.yaml, and the resolved recipe it holds."""
    try:
        lock = paths.read_json(paths.recipe_lock)
    except RsiError as exc:
        return [exc.message], None
    resolved = lock.get("resolved")
    if not isinstance(resolved, dict):
        return ["recipe.lock.json has no resolved recipe"], None
    problems = []
    if sha256_json(resolved) != lock.get("digest"):
        problems.append("recipe.lock.json does not hash to its digest")
    if lock.get("digest") != st.recipe_digest:
        problems.append("recipe.lock.json digest differs from the run's recipe digest")
    try:
        frozen = yamlsafe.load(paths.recipe.read_text())
    except (OSError, yaml.YAMLError) as exc:
        frozen = None
        problems.append(f"recipe.yaml is unreadable: {type(exc).__name__}")
    if frozen is not None and frozen != resolved:
        problems.append("recipe.yaml differs from recipe.lock.json")
    return problems, resolved


def _evaluator_lock_problems(paths: RunPaths, st: RunState, spec: dict[str, Any]) -> list[str]:
    """evaluator.lock.json against the run and the locked recipe's ``evaluator`` section."""
    try:
        evaluator = paths.read_json(paths.evaluator_lock)
    except RsiError as exc:
        return [exc.message]
    problems = []
    if evaluator.get("fingerprint") != st.evaluator_fingerprint:
        problems.append("evaluator.lock.json differs from the run's fingerprint")
    if (evaluator.get("engine"), evaluator.get("config")) != (
        spec.get("engine"),
        spec.get("config"),
    ):
        problems.append("evaluator.lock.json differs from the recipe's evaluator")
    if evaluator.get("isolation") != st.isolation:
        problems.append("evaluator.lock.json isolation differs from the run's")
    return problems


def _operator_lock_problems(
    paths: RunPaths, st: RunState, run_started: dict[str, Any]
) -> list[str]:
    """The operator lock against what run_started signed, and every certificate's gate code."""
    try:
        locked = paths.read_json(paths.recipe_lock).get("operators")
    except RsiError:
        return []  # the locks check reports an unreadable lock
    certified = [
        (f"{c.id} {split} #{a.attempt}", a.record.predicate.code)
        for c in st.candidates.values()
        for split, attempts in c.attempts.items()
        for a in attempts
        if a.record is not None
    ]
    problems = opidentity.signed_lock_problems(locked, run_started)
    return problems + opidentity.certificate_problems(locked, certified)


def _task_lock_problems(paths: RunPaths, st: RunState) -> list[str]:
    try:  # a malformed lock raises TaskSetChanged
        task_lock = TaskLock.from_json(paths.read_json(paths.tasks_lock))
    except RsiError as exc:
        return [exc.message]
    if task_lock.fingerprint != st.taskset_fingerprint:
        return ["tasks.lock.json differs from the run's task-set fingerprint"]
    return []


def _with_repo(paths: RunPaths, fn: Callable[[CandidateRepo], list[str]]) -> list[str]:
    try:
        repo = CandidateRepo(paths.repo)
    except RunFolderError as exc:
        return [f"repo.git: {exc.message}"]
    try:
        return fn(repo)
    finally:
        repo.close()


def _commit_problems(paths: RunPaths, st: RunState) -> list[str]:
    def check(repo: CandidateRepo) -> list[str]:
        problems = []
        if not repo.has_commit(st.seed_commit) or repo.tree_of(st.seed_commit) != st.seed_tree:
            problems.append("the seed commit named by run_started is missing or altered")
        for c in st.candidates.values():
            if c.commit is not None:
                problems += _candidate_commit_problems(repo, st, c, c.commit)
        return problems

    return _with_repo(paths, check)


def _candidate_commit_problems(
    repo: CandidateRepo, st: RunState, c: Candidate, commit: str
) -> list[str]:
    """One candidate's commit: in repo.git with its tree, its parents, its ref."""
    short = commit[:12]
    if not repo.has_commit(commit):
        return [f"{c.id}: commit {short} is missing from repo.git"]
    problems = []
    if repo.tree_of(commit) != c.tree:
        problems.append(f"{c.id}: commit {short} does not have the recorded tree")
    want = [p for p in (c.parent_commit, c.merged_commit) if p]  # a merge: two
    if repo.parents_of(commit) != want:
        problems.append(f"{c.id}: commit {short} does not descend from its parent")
    parent = st.candidates.get(c.parent) if c.parent else None
    if parent is not None and parent.commit != c.parent_commit:
        problems.append(f"{c.id}: parent commit differs from {parent.id}'s commit")
    second = st.candidates.get(c.second_parent) if c.second_parent else None
    if (second.commit if second else None) != c.merged_commit:
        problems.append(f"{c.id}: merged commit differs from its second parent's")
    if repo.ref_target(f"{CANDIDATE_REFS}/{c.id}") != commit:
        problems.append(f"{c.id}: {CANDIDATE_REFS}/{c.id} does not point at {short}")
    return problems


def _needed(c: Any) -> tuple[str, ...]:
    """The splits an admitted candidate must have records for: all of them, or those up
    to the stage a staged evaluation archived it at (``on_fail: archive``)."""
    names, stop = c.required_splits, c.stopped_at
    return names[: names.index(stop) + 1] if stop in names else names


def _archived_problems(c: Any) -> list[str]:
    """An archived stop must be what its stage's certified record says: below min_score."""
    stopped = (c.decision or {}).get("stopped")
    if not stopped:
        return []
    rec = c.record(str(stopped.get("stopped_at")))
    score, floor = stopped.get("score"), stopped.get("min_score")
    if (
        rec is None
        or rec.predicate.score != score
        or not (isinstance(floor, int | float) and score < floor)
    ):
        return [f"{c.id}: archived at {stopped.get('stopped_at')} without a record below its floor"]
    return []


def _admitted_problems(st: RunState) -> list[str]:
    problems = []
    for c in st.candidates.values():
        if c.state == "admitted":
            missing = [s for s in _needed(c) if c.record(s) is None]
            if missing:
                problems.append(f"{c.id}: admitted without a verified {'/'.join(missing)} record")
            problems += _archived_problems(c)
        if c.parent is not None and c.commit is not None:
            for pid in c.parents:  # a merge's two parents were both admitted
                parent = st.candidates.get(pid)
                if parent is None or parent.state != "admitted":
                    problems.append(f"{c.id}: its parent {pid} is not an admitted candidate")
    return problems


def _evidence(paths: RunPaths, st: RunState) -> tuple[list[str], int]:
    """Every trajectory a certificate names, and every log it names, exists unaltered; the
    problems and the trajectories looked at."""
    problems, count = [], 0
    for c in st.candidates.values():
        for tries in c.attempts.values():
            for a in tries:
                if a.record is None:
                    continue
                for task, digest in a.record.predicate.trajectories.items():
                    count += 1
                    try:
                        traj = get_json(paths.root, digest)
                        for ref in traj.get("artifacts", {}).values():
                            get_artifact(paths.root, ref)
                    except (ArchiveCorrupt, ValueError, AttributeError) as exc:
                        problems.append(f"{c.id}/{a.split}#{a.attempt} {task}: {exc.args[0]}")
    return problems, count


def _operators_found(paths: RunPaths) -> str:
    """What the operators check looked at, when nothing drifted."""
    try:
        locked = paths.read_json(paths.recipe_lock).get("operators") or {}
    except RsiError:
        return "no operator lock to compare"
    files = opidentity.locked_files(locked)
    return f"{len(locked)} operators, {len(files)} files on disk as locked"


def _task_count(paths: RunPaths) -> int:
    try:
        return len(TaskLock.from_json(paths.read_json(paths.tasks_lock)).files)
    except RsiError:
        return 0


# -- reproduce ------------------------------------------------------------------------


def reproduce_champion(
    paths: RunPaths,
    st: RunState,
    *,
    tolerance: float = 0.0,
    tasks_root: Path | None = None,
    candidate: str | None = None,
    rebuild: bool = False,
) -> tuple[Reproduction, list[str]]:
    """Re-evaluate the champion (or ``candidate``) on every split it was certified on.

    The run's frozen evaluator config and task lock are used; the task files on
    disk (at the lock's root, or ``tasks_root``) are checked against the lock
    first. Exports, trial folders and artifacts go to a temporary folder: the run
    folder is not written. Per-task rewards must match within ``tolerance``.
    """
    c: Candidate | None = st.candidates.get(candidate) if candidate else st.champion()
    rep = Reproduction(
        candidate=c.id if c else None,
        splits=[],
        tasks=0,
        tolerance=tolerance,
        max_deviation=0.0,
        deviations=[],
        isolation=None,
        notes=[],
    )
    if c is None:
        why = f"no candidate {candidate}" if candidate else "the run has no champion"
        return rep, [f"reproduce: {why}"]
    records = {s: r for s in SPLITS if (r := c.record(s)) is not None}
    rep.splits = list(records)
    if not records or c.commit is None:
        return rep, [f"reproduce: {c.id} has no verified record"]
    try:
        spec, task_lock, taskset = _reproduction_inputs(paths, st, tuple(records), tasks_root)
    except RsiError as exc:
        return rep, [f"reproduce: {exc}"]
    except (KeyError, TypeError) as exc:
        return rep, [f"reproduce: recipe.lock.json has no evaluator ({exc!r})"]

    with tempfile.TemporaryDirectory(prefix="rsiframe-reproduce-") as tmp:
        problems = _reevaluate(rep, paths, st, c, records, spec, task_lock, taskset,
                               Path(tmp), rebuild=rebuild)  # fmt: skip
    for d in rep.deviations:
        problems.append(
            f"reproduce: {c.id}/{d.split} {d.task}: recorded {d.recorded:g}, "
            f"reproduced {d.reproduced:g}" + (f" ({d.error})" if d.error else "")
        )
    return rep, problems


def _reevaluate(
    rep: Reproduction,
    paths: RunPaths,
    st: RunState,
    c: Candidate,
    records: dict[str, Any],
    spec: dict[str, Any],
    task_lock: Any,
    taskset: Any,
    scratch: Path,
    *,
    rebuild: bool,
) -> list[str]:
    """The candidate evaluated again in ``scratch`` with the run's evaluator: what failed."""
    try:
        cache = scratch / "cache" if rebuild else None
        evaluator = make_evaluator(spec["engine"], spec["config"], scratch / "work", cache)
    except RsiError as exc:
        return [f"reproduce: {exc}"]
    problems: list[str] = []
    try:
        rep.isolation = evaluator.isolation
        now = evaluator_parts(evaluator)
        if now["fingerprint"] != st.evaluator_fingerprint:
            changed = ", ".join(evaluator_changes(now, paths.read_json(paths.evaluator_lock)))
            rep.notes.append(f"the evaluator here differs from the run's: {changed}")
        export = _export(paths, c, scratch / "export")
        store = scratch / "artifacts"
        store.mkdir()
        # builds are audited against the same gate/sealed items
        evaluator.protect(tasks_by_split(taskset, task_lock.split))
        for split, record in records.items():
            problems += _reevaluate_split(
                rep, evaluator, taskset, export, store, c.id, split, task_lock.split[split],
                record, rebuild,
            )  # fmt: skip
    except (ExportMismatch, RsiError) as exc:
        problems.append(f"reproduce: {exc}")
    except Exception as exc:  # the evaluation itself failed (e.g. a build): say so
        problems.append(f"reproduce: {c.id}: evaluation failed: {type(exc).__name__}: {exc}")
    finally:
        evaluator.close()
    return problems


def _export(paths: RunPaths, c: Candidate, export: Path) -> Path:
    assert c.commit is not None  # reproduce_champion checked it
    repo = CandidateRepo(paths.repo)
    try:
        repo.export(c.commit, export)  # checked against the commit's tree
    finally:
        repo.close()
    return export


def _reevaluate_split(
    rep: Reproduction,
    evaluator: Any,
    taskset: Any,
    export: Path,
    store: Path,
    cid: str,
    split: str,
    ids: list[str],
    record: Any,
    rebuild: bool,
) -> list[str]:
    """One split's tasks run again and compared with the record's rewards."""
    built: list[dict] = []
    out = run_tasks(
        evaluator, taskset, export, ids, lambda b: put_artifact(store, b), on_built=built.append
    )
    _compare_model(rep, split, record.predicate.model, built, rebuild)
    before = len(rep.deviations)
    problems = _compare_rewards(
        rep, cid, split, ids, record.predicate.rewards, out, tolerance=rep.tolerance
    )
    if len(rep.deviations) > before:
        _host_differences(rep, split, record.predicate.model, built)
    return problems


def _reproduction_inputs(
    paths: RunPaths, st: RunState, splits: tuple[str, ...], tasks_root: Path | None
) -> tuple[dict[str, Any], TaskLock, TaskSet]:
    """The locked evaluator spec, and the task lock and task set, checked against the files.

    Raises :class:`RsiError`, or ``KeyError``/``TypeError`` when recipe.lock.json has no
    evaluator section.
    """
    lock = paths.read_json(paths.recipe_lock)
    spec = lock["resolved"]["evaluator"]
    task_lock = TaskLock.from_json(paths.read_json(paths.tasks_lock))
    if task_lock.fingerprint != st.taskset_fingerprint:
        raise LockMismatch("tasks.lock.json differs from the run's fingerprint")
    if tasks_root is not None:
        task_lock.root = str(Path(tasks_root).resolve())
    task_lock.check(splits)
    return spec, task_lock, TaskSet.load(Path(task_lock.root))


def _compare_rewards(
    rep: Reproduction,
    cid: str,
    split: str,
    ids: list[str],
    recorded: dict[str, float],
    out: EvaluationOutput,
    tolerance: float,
) -> list[str]:
    """Count ``ids`` into ``rep`` and note each reward off by more than ``tolerance``.

    Returns the problems of tasks without a recorded reward (deviations are reported last).
    """
    problems = []
    for t in ids:
        got, want = out.runs[t].reward, recorded.get(t)
        rep.tasks += 1
        if want is None:
            problems.append(f"reproduce: {cid}/{split} {t} has no recorded reward")
            continue
        dev = abs(got - want)
        rep.max_deviation = max(rep.max_deviation, dev)
        if dev > tolerance:
            rep.deviations.append(
                TaskDeviation(
                    split=split, task=t, recorded=want, reproduced=got, error=out.runs[t].error
                )
            )
    return problems


def _compare_model(
    rep: Reproduction, split: str, recorded: dict | None, built: list[dict], rebuild: bool
) -> None:
    """D/T/H: say how the model was had (rebuilt, or from the cache) and whether it is the
    recorded one (training may not be exact elsewhere)."""
    if not recorded or not built:
        return
    steps = built[-1].get("steps") or {}
    hits = [s for s in ("data", "train") if (steps.get(s) or {}).get("cached")]
    if rebuild:
        rep.build = "rebuilt"
        rep.notes.append(f"{split}: dataset and model rebuilt here in an empty cache (--rebuild)")
    else:
        rep.build = "cache" if hits else "rebuilt"
        how = f"read from the build cache ({', '.join(hits)})" if hits else "built here"
        rep.notes.append(f"{split}: dataset and model {how}; --rebuild builds them again")
    want, got = recorded.get("weights_digest"), built[-1].get("weights_digest")
    if want and got and want != got:
        rep.notes.append(
            f"{split}: the rebuilt model's weights differ from the recorded ones "
            f"({str(got)[:19]} vs {str(want)[:19]}); rewards are compared within the tolerance"
        )


def _host_differences(
    rep: Reproduction, split: str, recorded: dict | None, built: list[dict]
) -> None:
    """D/T/H rewards moved past the tolerance: name the host facts unlike the record's."""
    if not recorded or not built:
        return
    here, was = built[-1].get("host") or {}, recorded.get("host") or {}
    names = differing(was, here)
    rep.host_differs = sorted(set(rep.host_differs) | set(names))
    if names:
        what = "; ".join(describe(n, was.get(n), here.get(n)) for n in names)
        rep.notes.append(f"{split}: host facts that differ from the record's: {what}")
    else:
        rep.notes.append(f"{split}: every recorded host fact is the same here")
