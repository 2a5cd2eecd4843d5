"""Starting a run: a new run folder (keys, locks, seed commit), or an existing one re-checked.

:func:`create_run` validates everything before it creates anything; :func:`open_run`
re-verifies the archive, the recipe, the task set and the evaluator against the run's
locks, and touches nothing unless every check passes. Both return the :class:`RunParts`
an :class:`~rsiframe.engine.loop.Engine` is built from.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsiframe import __version__
from rsiframe.archive.events import RunStarted
from rsiframe.archive.loader import load_run
from rsiframe.archive.log import Archive, Event
from rsiframe.archive.runfolder import RunLock, RunPaths
from rsiframe.archive.state import RunState
from rsiframe.certs.signing import EVENT_TYPE, Signer, create_signer, load_signer
from rsiframe.engine import leftovers
from rsiframe.engine.hooks import Hooks
from rsiframe.engine.preflight import ping_or_refuse, plan
from rsiframe.errors import ArchiveCorrupt, LockMismatch, RunFolderError
from rsiframe.evaluators.base import Evaluator
from rsiframe.evaluators.registry import build_evaluator, evaluator_changes, evaluator_parts
from rsiframe.executors.base import Executor
from rsiframe.executors.local import LocalExecutor
from rsiframe.executors.registry import check, open_executor, session_spec
from rsiframe.gateway.runmodels import FOLDER as MODELS_FOLDER
from rsiframe.gateway.runmodels import REPLAY_OF
from rsiframe.recipe import load as recipe_mod
from rsiframe.recipe.overrides import folder_safe
from rsiframe.repo.candidates import CANDIDATE_REFS, CandidateRepo, fresh_dir
from rsiframe.slots import identity as opidentity
from rsiframe.tasks.taskset import TaskLock, TaskSet
from rsiframe.util import fsflags

if TYPE_CHECKING:
    from rsiframe.gateway.modelcheck import ModelPing


@dataclass
class RunParts:
    """Everything a run is driven with, checked and opened."""

    paths: RunPaths
    resolved: recipe_mod.ResolvedRecipe
    state: RunState
    archive: Archive
    signer: Signer
    task_lock: TaskLock
    taskset: TaskSet
    evaluator: Evaluator
    repo: CandidateRepo
    lock: RunLock
    executor: Executor = field(default_factory=LocalExecutor)  # this session's (issue 11.3)
    #: the run's lifecycle hooks: the archive notifies them of every event it writes
    hooks: Hooks = field(default_factory=Hooks)
    #: the declared models' check before this session's first generation (``models_checked``)
    pings: list[ModelPing] = field(default_factory=list)


def create_run(
    recipe_path: Path,
    sets: list[str] | None,
    out: Path | None,
    ray_address: str | None = None,
    unsets: list[str] | None = None,
    replay_of: Path | None = None,
    method: str | Path | None = None,
    model_check: bool = True,
) -> tuple[RunParts, RunStarted]:
    """Validate everything, then create the run folder, keys, locks and the seed commit;
    returns the parts and the ``run_started`` event to record first. ``replay_of``: the
    ledger folder whose answers alone a replay's gateway serves (no endpoint needed);
    ``method``: the recipe's target run with that method (``--method``); ``model_check``:
    each declared model answers one tiny call before the folder exists."""
    p = plan(recipe_path, sets, ray_address, unsets, replay=replay_of is not None,
             method=method, model_check=model_check)  # fmt: skip
    # connected before the run folder exists: a cluster that fails leaves nothing behind
    executor = open_executor(p.executor, p.executor_key)
    resolved, taskset, split, seed_snap = p.resolved, p.taskset, p.split, p.seed
    r = resolved.recipe

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    paths = RunPaths(_new_folder(out, Path("archive") / f"{folder_safe(r.name)}-{stamp}"))
    lock = RunLock(paths).acquire()
    run_id = f"{folder_safe(r.name)}-{stamp}-{random.SystemRandom().randrange(16**6):06x}"

    work = fresh_dir(paths.work)
    evaluator = make_evaluator(resolved, work)
    task_lock = TaskLock.freeze(taskset, split)
    signer = create_signer(run_id)
    operators = opidentity.identities(resolved)  # operator code, signed below by digest
    paths.recipe.write_text(recipe_mod.dump(resolved.data))
    paths.write_json(
        paths.recipe_lock,
        {
            "digest": resolved.digest,
            "source": str(resolved.source.resolve()),
            "resolved": resolved.data,
            "operators": operators,
        },
    )
    paths.write_json(paths.tasks_lock, task_lock.to_json())
    paths.write_json(paths.evaluator_lock, evaluator_parts(evaluator))
    paths.pubkey.write_bytes(signer.public.pem())
    repo = CandidateRepo.create(paths.repo, paths.work / "exports")
    seed_tree = repo.store(seed_snap)
    seed_commit = repo.commit(
        seed_tree, None, "c0000: seed", f"{CANDIDATE_REFS}/c0000", entries=seed_snap.entries
    )
    started = RunStarted(
        run_id=run_id,
        name=r.name,
        recipe_digest=resolved.digest,
        taskset_fingerprint=task_lock.fingerprint,
        evaluator_fingerprint=evaluator.fingerprint(),
        isolation=evaluator.isolation,
        keyid=signer.keyid,
        framework_version=__version__,
        seed_commit=seed_commit,
        seed_tree=seed_tree,
        operators_digest=opidentity.lock_digest(operators),
    )
    if replay_of is not None:  # read by the gateway's start, on resume too
        (paths.root / MODELS_FOLDER).mkdir()
        (paths.root / MODELS_FOLDER / REPLAY_OF).write_text(f"{replay_of.resolve()}\n")
    state = RunState(verifier=signer.public)
    hooks = Hooks()
    archive = open_archive(paths, None, signer, hooks)
    parts = RunParts(
        paths, resolved, state, archive, signer, task_lock, taskset, evaluator, repo, lock,
        executor, hooks, p.pings,
    )  # fmt: skip
    return parts, started


def _new_folder(out: Path | None, default: Path) -> Path:
    """The new run's folder: ``out`` (empty or absent), or ``default`` made unique."""
    root, n = (out if out is not None else default), 2
    while out is None and root.exists():
        root = default.with_name(f"{default.name}-{n}")
        n += 1
    if root.exists() and any(root.iterdir()):
        raise RunFolderError("output folder exists and is not empty", where=str(root))
    root.mkdir(parents=True, exist_ok=True)
    fsflags.mark_top(root)  # its folders away from the machine's recent deletions (perf)
    return root.resolve()


def open_run(
    root: Path,
    ray_address: str | None = None,
    *,
    model_check: bool = True,
    say: Callable[[str], None] = lambda line: None,
) -> tuple[RunParts, list[str]]:
    """Re-verify archive and locks, then open an existing run; notes on repairs made.
    What a killed driver left running is waited for or ended first (``say`` tells which);
    with ``model_check``, each declared model answers one tiny call before anything of
    the run is touched."""
    paths = RunPaths(Path(root).resolve()).check()
    lock = leftovers.take_lock(paths, say)
    try:
        loaded = load_run(paths.root, snapshot=True)  # the fold resumes from a signed snapshot
        st = loaded.state
        if st.problems:
            raise ArchiveCorrupt(f"archive: {st.problems[0]}", where=str(paths.root))
        resolved = _check_recipe(paths, st)
        run_started = loaded.events[0].data if loaded.events else {}
        lock_json = paths.read_json(paths.recipe_lock)
        opidentity.require_unchanged(lock_json, run_started, resolved, str(paths.root))
        task_lock = TaskLock.from_json(paths.read_json(paths.tasks_lock))
        if task_lock.fingerprint != st.taskset_fingerprint:
            raise LockMismatch(
                "tasks.lock.json does not match the run's task-set fingerprint",
                where=str(paths.root),
            )
        task_lock.check()
        taskset = TaskSet.load(Path(task_lock.root))
        work = fresh_dir(paths.work)
        evaluator = make_evaluator(resolved, work)
        _check_evaluator(paths, evaluator, st)
        signer = load_signer(st.run_id, st.verifier.keyid)
        spec, key = session_spec(resolved.recipe.evaluator.executor, ray_address)
        check(spec, key, resolved.recipe.evaluator.engine)
        models = resolved.recipe.models
        replay = (paths.root / MODELS_FOLDER / REPLAY_OF).is_file()  # no endpoint to check
        pings = ping_or_refuse(models, str(paths.root)) if model_check and not replay else []
        executor = open_executor(spec, key)
        repo = CandidateRepo(paths.repo, paths.work / "exports")
        # only once every check passed is the archive touched: a refusal changes nothing
        notes = []
        if loaded.torn:
            msg = Archive.repair_torn(paths.root, loaded.torn)
            notes = [msg] if msg else []
        last = loaded.events[-1] if loaded.events else None
        hooks = Hooks()
        archive = open_archive(paths, last, signer, hooks)
    except BaseException:
        lock.release()
        raise
    parts = RunParts(
        paths, resolved, st, archive, signer, task_lock, taskset, evaluator, repo, lock,
        executor, hooks, pings,
    )  # fmt: skip
    return parts, notes


def open_archive(paths: RunPaths, last: Event | None, signer: Signer, hooks: Hooks) -> Archive:
    """The run's writer: its events signed, group commit on (one fsync per sync point, not
    per event: the engine's sync points make what an effect depends on durable), every
    event handed to the run's hooks."""
    sign = event_signer(signer)
    return Archive(paths.root, last, sign=sign, on_append=hooks.notify, group_commit=True)


def event_signer(signer: Signer) -> Callable[[bytes], str]:
    return lambda payload: signer.sign_bytes(EVENT_TYPE, payload)


def make_evaluator(resolved: recipe_mod.ResolvedRecipe, work: Path) -> Evaluator:
    """The run's evaluator, sized for the candidates it keeps in flight."""
    r = resolved.recipe
    return build_evaluator(
        r.evaluator.engine, resolved.evaluator_config, work, parallel=r.concurrency.candidates
    )


def _check_recipe(paths: RunPaths, st: RunState) -> recipe_mod.ResolvedRecipe:
    lock = paths.read_json(paths.recipe_lock)
    raw = recipe_mod.load_yaml(paths.recipe)
    if not isinstance(raw, dict):
        raise LockMismatch("recipe.yaml is no longer a recipe", where=str(paths.root))
    changed = _diff_keys(lock.get("resolved", {}), raw)
    if changed:
        raise LockMismatch(
            f"the recipe changed since the run began: {', '.join(changed[:5])}",
            where=str(paths.recipe),
        )
    resolved = recipe_mod.from_data(raw, paths.recipe)
    if resolved.digest != lock.get("digest") or resolved.digest != st.recipe_digest:
        changed = _diff_keys(lock.get("resolved", {}), resolved.data)
        what = ", ".join(changed[:5]) or "its digest"
        raise LockMismatch(
            f"the recipe changed since the run began: {what}", where=str(paths.recipe)
        )
    return resolved


def _diff_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b), key=str):
            out += _diff_keys(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if a == b else [prefix or "(root)"]


def _check_evaluator(paths: RunPaths, evaluator: Evaluator, st: RunState) -> None:
    lock = paths.read_json(paths.evaluator_lock)
    now = evaluator_parts(evaluator)
    if now["fingerprint"] == lock.get("fingerprint") == st.evaluator_fingerprint:
        return
    changed = evaluator_changes(now, lock)
    detail = ""
    if "isolation" in changed:
        detail = f" (isolation {lock.get('isolation')} -> {now['isolation']})"
    raise LockMismatch(
        f"the evaluator changed since the run began: {', '.join(changed)}{detail}",
        where=str(paths.root),
    )
