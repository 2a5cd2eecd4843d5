"""The engine: drives one run through candidate transactions, from events and back to events.

::

    select -> rollout -> [analyze] -> mutate -> guardrail -> [validate] -> [novelty]
      -> commit -> EVALUATE (train, gate) -> gate -> record -> [reflect per generation]

Every step derives what to do next from the folded state, so ``run`` and
``resume`` are the same loop: stale proposals are abandoned, open evaluations
are marked interrupted and retried as a new attempt, committed candidates are
evaluated, certified ones gated, gated ones recorded. Evaluate and guardrail
belong to the framework; operators only return typed results.
"""

from __future__ import annotations

import random
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import BaseModel

from rsiframe import __version__, faults, health, opcode
from rsiframe import recipe as recipe_mod
from rsiframe.api import (
    Analysis,
    AnalyzeContext,
    AnalyzeOperator,
    Check,
    GateContext,
    GateDecision,
    GateOperator,
    MutateContext,
    MutateOperator,
    Mutation,
    Notes,
    NoveltyContext,
    NoveltyOperator,
    Operator,
    RecordContext,
    RecordOperator,
    ReflectContext,
    Reflection,
    ReflectOperator,
    Rollout,
    RolloutContext,
    RolloutOperator,
    SelectContext,
    Selection,
    SelectOperator,
    ValidateContext,
    ValidateOperator,
)
from rsiframe.archive import Archive, Event
from rsiframe.budget import BudgetGuard
from rsiframe.build import BuildRejected
from rsiframe.candidates import CANDIDATE_REFS, REJECTED_REFS, CandidateRepo, fresh_dir
from rsiframe.errors import ArchiveCorrupt, LockMismatch, RsiError, RunFolderError
from rsiframe.evaluator import (
    ENGINES,
    EvaluationOutput,
    LocalEngine,
    TaskRun,
    evaluator_changes,
    evaluator_parts,
    run_tasks,
)
from rsiframe.gittree import Snapshot, snapshot
from rsiframe.guardrail import check as guardrail_check
from rsiframe.loader import load_run
from rsiframe.overrides import folder_safe
from rsiframe.preflight import plan
from rsiframe.records import EvaluationPredicate, aggregate, make_statement
from rsiframe.runfolder import RunLock, RunPaths
from rsiframe.runview import StateView, as_view
from rsiframe.signing import EVENT_TYPE, Signer, create_signer, load_signer
from rsiframe.state import Candidate, RunState
from rsiframe.surface import Surface
from rsiframe.tasks import SPLITS, TaskLock, TaskSet, tasks_by_split
from rsiframe.untrusted import UntrustedOperator

R = TypeVar("R", bound=BaseModel)


#: exported candidate trees kept in work/exports (admitted ones are reused as parents)
KEEP_EXPORTS = 16
#: the largest operator result (as JSON) the engine accepts; a bigger one fails the call,
#: so no operator can bloat the archive (results land in events and artifacts)
MAX_RESULT_BYTES = 8 << 20


class Progress:
    """Where the engine reports what it is doing; the CLI draws it with Rich."""

    def event(self, ev: Event, state: RunState) -> None: ...

    def stage(self, cid: str, stage: str) -> None: ...

    def tasks(self, cid: str, split: str, done: int, total: int) -> None: ...

    def note(self, message: str) -> None: ...


class OperatorFailed(Exception):
    def __init__(self, slot: str, exc: BaseException) -> None:
        super().__init__(f"{slot} operator failed: {type(exc).__name__}: {exc}")
        self.slot = slot
        self.trace = "".join(traceback.format_exception(exc))


@dataclass
class Timings:
    """Seconds per candidate spent in operators and in task execution (for benchmarks)."""

    operator: dict[str, float] = field(default_factory=dict)
    tasks: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)

    def add(self, table: dict[str, float], cid: str, seconds: float) -> None:
        table[cid] = table.get(cid, 0.0) + seconds


def _candidate_id(n: int) -> str:
    return f"c{n:04d}"


class Engine:
    """Drives one run. Build it with :meth:`create` (new run) or :meth:`open` (resume)."""

    def __init__(
        self,
        paths: RunPaths,
        resolved: recipe_mod.ResolvedRecipe,
        state: RunState,
        archive: Archive,
        signer: Signer,
        task_lock: TaskLock,
        taskset: TaskSet,
        evaluator: LocalEngine,
        repo: CandidateRepo,
        lock: RunLock,
        retry_failed: bool = False,
        resumed: bool = False,
    ) -> None:
        self.paths = paths
        self.resumed = resumed
        self.resolved = resolved
        self.recipe = resolved.recipe
        self.state = state
        self.archive = archive
        self.signer = signer
        self.task_lock = task_lock
        self.taskset = taskset
        self.evaluator = evaluator
        # training data is audited against the gate and sealed items (D/T/H builds)
        evaluator.protect(tasks_by_split(taskset, task_lock.split))
        self.repo = repo
        self.lock = lock
        self.retry_failed = retry_failed
        self.progress = Progress()
        self.timings = Timings()
        self.budget = BudgetGuard(self.recipe.budget)
        self.surface = Surface(
            tuple(self.recipe.surface.include), tuple(self.recipe.surface.exclude)
        )
        self.view = StateView(
            state,
            repo,
            paths.root,
            gate_detail=self.recipe.information.gate_detail,
            on_violation=self._violation,
        )
        self.ops: dict[str, Operator] = {
            slot: cls(config) for slot, (cls, config) in resolved.operators.items()
        }
        self.select_op = cast(SelectOperator, self.ops["select"])
        self.rollout_op = cast(RolloutOperator, self.ops["rollout"])
        self.mutate_op = cast(MutateOperator, self.ops["mutate"])
        self.gate_op = cast(GateOperator, self.ops["gate"])
        self.record_op = cast(RecordOperator, self.ops["record"])
        self.analyze_op = cast(AnalyzeOperator | None, self.ops.get("analyze"))
        self.validate_op = cast(ValidateOperator | None, self.ops.get("validate"))
        self.novelty_op = cast(NoveltyOperator | None, self.ops.get("novelty"))
        self.reflect_op = cast(ReflectOperator | None, self.ops.get("reflect"))
        for op in self.ops.values():
            if isinstance(op, UntrustedOperator):  # its code comes from candidate trees
                op.sources = lambda cid: self._clean_export(self.state.candidates[cid])
        self._live: set[str] = set()
        self._retried: set[tuple[str, str]] = set()
        archive.listeners.append(self._on_event)

    # -- construction ---------------------------------------------------------------

    @classmethod
    def create(
        cls,
        recipe_path: Path,
        sets: list[str] | None = None,
        out: Path | None = None,
        unsets: list[str] | None = None,
    ) -> Engine:
        """Validate everything, then create the run folder, keys, locks and the seed commit."""
        p = plan(recipe_path, sets, unsets)
        resolved, taskset, split, seed_snap = p.resolved, p.taskset, p.split, p.seed
        r = resolved.recipe

        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        root = out if out is not None else Path("archive") / f"{folder_safe(r.name)}-{stamp}"
        n = 2
        base = root
        while out is None and root.exists():
            root = base.with_name(f"{base.name}-{n}")
            n += 1
        if root.exists() and any(root.iterdir()):
            raise RunFolderError("output folder exists and is not empty", where=str(root))
        root.mkdir(parents=True, exist_ok=True)
        paths = RunPaths(root.resolve())
        lock = RunLock(paths).acquire()
        run_id = f"{folder_safe(r.name)}-{stamp}-{random.SystemRandom().randrange(16**6):06x}"

        work = fresh_dir(paths.work)
        evaluator = _make_evaluator(resolved, work)
        task_lock = TaskLock.freeze(taskset, split)
        signer = create_signer(run_id)
        operators = opcode.identities(resolved)  # operator code, signed below by digest
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
        repo = CandidateRepo.create(paths.repo)
        seed_tree = repo.store(seed_snap)
        seed_commit = repo.commit(
            seed_tree, None, "c0000: seed", f"{CANDIDATE_REFS}/c0000", entries=seed_snap.entries
        )

        state = RunState(verifier=signer.public)
        archive = Archive(paths.root, None, sign=_event_signer(signer))
        engine = cls(
            paths, resolved, state, archive, signer, task_lock, taskset, evaluator, repo, lock
        )
        engine._append(
            "run_started",
            {
                "run_id": run_id,
                "name": r.name,
                "recipe_digest": resolved.digest,
                "taskset_fingerprint": task_lock.fingerprint,
                "evaluator_fingerprint": evaluator.fingerprint(),
                "isolation": evaluator.isolation,
                "keyid": signer.keyid,
                "framework_version": __version__,
                "seed_commit": seed_commit,
                "seed_tree": seed_tree,
                "operators_digest": opcode.lock_digest(operators),
            },
        )
        engine._append("session_started", {"resumed": False})
        return engine

    @classmethod
    def open(cls, root: Path, retry_failed: bool = False) -> tuple[Engine, list[str]]:
        """Re-verify archive and locks, then rebuild the engine of an existing run."""
        paths = RunPaths(Path(root).resolve()).check()
        lock = RunLock(paths).acquire()
        try:
            loaded = load_run(paths.root)
            st = loaded.state
            if st.problems:
                raise ArchiveCorrupt(f"archive: {st.problems[0]}", where=str(paths.root))
            resolved = _check_recipe(paths, st)
            run_started = loaded.events[0].data if loaded.events else {}
            lock_json = paths.read_json(paths.recipe_lock)
            opcode.require_unchanged(lock_json, run_started, resolved, str(paths.root))
            task_lock = TaskLock.from_json(paths.read_json(paths.tasks_lock))
            if task_lock.fingerprint != st.taskset_fingerprint:
                raise LockMismatch(
                    "tasks.lock.json does not match the run's task-set fingerprint",
                    where=str(paths.root),
                )
            task_lock.check()
            taskset = TaskSet.load(Path(task_lock.root))
            work = fresh_dir(paths.work)
            evaluator = _make_evaluator(resolved, work)
            _check_evaluator(paths, evaluator, st)
            signer = load_signer(st.run_id, st.verifier.keyid)
            repo = CandidateRepo(paths.repo)
            # only once every check passed is the archive touched: a refusal changes nothing
            notes = []
            if loaded.torn:
                msg = Archive.repair_torn(paths.root, loaded.torn)
                notes = [msg] if msg else []
            last = loaded.events[-1] if loaded.events else None
            archive = Archive(paths.root, last, sign=_event_signer(signer))
        except BaseException:
            lock.release()
            raise
        engine = cls(
            paths,
            resolved,
            st,
            archive,
            signer,
            task_lock,
            taskset,
            evaluator,
            repo,
            lock,
            retry_failed=retry_failed,
            resumed=True,
        )
        return engine, notes

    def close(self) -> None:
        self.evaluator.close()
        self.archive.close()
        self.repo.close()
        shutil.rmtree(self.paths.work, ignore_errors=True)
        self.lock.release()

    # -- plumbing -------------------------------------------------------------------

    def _append(self, type_: str, data: dict[str, Any]) -> Event:
        return self.archive.append(type_, data)

    def _on_event(self, ev: Event) -> None:
        self.state.apply(ev)
        self.progress.event(ev, self.state)

    def _rng(self, cid: str, slot: str) -> random.Random:
        return random.Random(f"{self.recipe.random_seed}:{cid}:{slot}")

    def _violation(self, v: dict[str, Any]) -> None:
        """An operator read beyond its view: on record at once, even if it swallows the error."""
        self._append("information_flow_violation", v)

    def _call(self, cid: str, slot: str, fn: Callable[[], R], expect: type[R]) -> R:
        """Run one operator call, timed; its exceptions and bad results become OperatorFailed."""
        faults.reached("stage:" + slot)
        self.progress.stage(cid, slot)
        start = time.perf_counter()
        spec = self.recipe.slots.get(slot)
        try:
            with self.view.calling(slot, spec.operator if spec else "", cid):
                result = fn()
            if not isinstance(result, expect):
                raise TypeError(f"returned {type(result).__name__}, expected {expect.__name__}")
            size = len(result.model_dump_json())
            if size > MAX_RESULT_BYTES:
                raise ValueError(f"result too large: {size} bytes (limit {MAX_RESULT_BYTES})")
            return result
        except Exception as exc:
            raise OperatorFailed(slot, exc) from exc
        finally:
            self.timings.add(self.timings.operator, cid, time.perf_counter() - start)

    # -- the loop ---------------------------------------------------------------------

    def needs_work(self) -> bool:
        """False for a finished or exhausted run with nothing to retry."""
        terminal = self.state.terminal
        if terminal is None or terminal["state"] in ("interrupted", "failed"):
            return True
        if self.retry_failed:
            return any(c.state == "failed" for c in self.state.candidates.values())
        return False

    def drive(self) -> str:
        """Run until finished, exhausted or failed; returns the run state.

        Ctrl-C appends ``run_interrupted``; any other exception (a :class:`RunFailure`, a
        user error such as a task edited mid-run, a bug) ends the run as ``failed``, still
        resumable, and propagates for the caller to report.
        """
        if not self.needs_work():  # an ended run is left exactly as it is
            assert self.state.terminal is not None
            return str(self.state.terminal["state"])
        try:
            if self.resumed:
                self.resumed = False
                self._append(
                    "session_started", {"resumed": True, "retry_failed": self.retry_failed}
                )
            try:
                while True:
                    outcome = self._step()
                    if outcome is not None:
                        return outcome
            except KeyboardInterrupt:
                self._append("run_interrupted", {"reason": "interrupted by the user"})
                raise
        except Exception as exc:  # the run stays resumable; the caller reports the error
            self._append("run_finished", {"state": "failed", "reason": _failure_reason(exc)})
            raise

    def _step(self) -> str | None:
        st = self.state
        if self._tidy():
            return None
        seed = st.seed
        if seed is None:
            self._propose_seed()
            return None
        if seed.commit is None:  # a crash between the seed's two events: its commit exists
            self._seed_mutated()
            return None
        dead = health.dead_seed(seed)  # a broken setup, not a low score: do not evolve it
        if dead is not None:
            return self._finish("failed", dead)
        for c in st.candidates.values():
            s = c.state
            if s in ("mutated", "evaluating"):
                split = c.next_split()
                assert split is not None
                return self._evaluate(c, split)
            if s == "failed" and self.retry_failed:
                split = c.next_split()
                if split is not None and (c.id, split) not in self._retried:
                    self._retried.add((c.id, split))
                    return self._evaluate(c, split)
            if s == "certified":
                self._gate(c)
                return None
            if s in ("admitted", "declined") and not c.recorded:
                self._record(c)
                return None
        if seed.state != "admitted":
            reason = "the seed could not be evaluated"
            errors = [
                a.error
                for s in seed.required_splits
                if (a := seed.latest(s)) is not None and a.error
            ]
            if errors:
                reason += f": {errors[0].splitlines()[0]}"
            return self._finish("failed", reason + " (fix it, then resume --retry-failed)")
        g = st.generation
        per_gen = self.recipe.children_per_generation
        gen_full = g == 0 or st.proposed_in.get(g, 0) >= per_gen
        if g >= 1 and gen_full and self.reflect_op is not None and g not in st.reflected:
            self._reflect(g)
            return None
        if gen_full:
            refusal = self.budget.refuse_generation(st)
            if refusal is not None:
                limit = self.recipe.budget.max_generations
                if limit is not None and g >= limit:
                    return self._finish("finished", f"completed {g} generation(s)")
                return self._finish("budget_exhausted", refusal)
            self._append("generation_started", {"generation": g + 1})
            return None
        refusal = self.budget.refuse_candidate(st)
        if refusal is not None:
            return self._finish("budget_exhausted", refusal)
        self._propose_child(g)
        return None

    def _tidy(self) -> bool:
        """Close what an earlier process left open; True if it appended anything."""
        for c in self.state.candidates.values():
            if c.state == "proposed" and c.id not in self._live and not c.is_seed:
                self._append(
                    "candidate_abandoned", {"id": c.id, "reason": "the mutation did not finish"}
                )
                return True
            a = c.open_attempt()
            if a is not None:
                self._append(
                    "evaluation_interrupted", {"id": c.id, "split": a.split, "attempt": a.attempt}
                )
                return True
        return False

    def _finish(self, state: str, reason: str) -> str:
        champ = self.state.champion()
        if (
            state != "failed"
            and champ is not None
            and champ.record("sealed") is None
            and self.budget.refuse_evaluation(self.state, reserved=True) is None
        ):
            self._evaluate(champ, "sealed", reserved=True)
        self._append("run_finished", {"state": state, "reason": reason})
        return state

    # -- seed -------------------------------------------------------------------------

    def _propose_seed(self) -> None:
        cid = _candidate_id(0)
        self._append(
            "candidate_proposed", {"id": cid, "parent": None, "generation": 0, "reason": "seed"}
        )
        self._seed_mutated()

    def _seed_mutated(self) -> None:
        """The seed's commit (made with the run folder) is its mutation."""
        self._append(
            "candidate_mutated",
            {
                "id": _candidate_id(0),
                "commit": self.state.seed_commit,
                "tree": self.state.seed_tree,
                "parent_commit": None,
                "description": "seed",
                "changes": [],
            },
        )

    # -- proposing a child ------------------------------------------------------------

    def _propose_child(self, generation: int) -> None:
        st = self.state
        cid = _candidate_id(len(st.candidates))
        t0 = time.perf_counter()
        rng = self._rng(cid, "select")
        ctx = SelectContext(self.view, rng, generation)
        try:
            sel = self._call(cid, "select", lambda: self.select_op.select(ctx), Selection)
        except OperatorFailed as exc:
            raise RunFailure(str(exc)) from exc
        parent = st.candidates.get(sel.parent)
        if parent is None or parent.state != "admitted":
            raise RunFailure(
                f"select operator chose {sel.parent!r}, which is not an admitted candidate"
            )
        self._append(
            "candidate_proposed",
            {"id": cid, "parent": parent.id, "generation": generation, "reason": sel.reason},
        )
        self._live.add(cid)
        workdir = self.paths.work / f"mutate-{cid}"
        try:
            self._transaction(cid, parent, generation, workdir)
        except OperatorFailed as exc:
            digest = self.archive.put(exc.trace.encode())
            self._append(
                "candidate_rejected",
                {"id": cid, "stage": exc.slot, "reasons": [str(exc)], "traceback": digest},
            )
        finally:
            self._live.discard(cid)
            shutil.rmtree(workdir, ignore_errors=True)
            self.timings.add(self.timings.total, cid, time.perf_counter() - t0)

    def _transaction(self, cid: str, parent: Candidate, generation: int, workdir: Path) -> None:
        pview = as_view(parent)
        rollout = self._rollout(cid, parent, generation)
        analysis = None
        if self.analyze_op is not None:
            aop = self.analyze_op
            ctx = AnalyzeContext(self.view, self._rng(cid, "analyze"), generation, pview, rollout)
            analysis = self._call(cid, "analyze", lambda: aop.analyze(ctx), Analysis)
            self._append(
                "analysis_done",
                {"id": cid, "analysis": self.archive.put_json(analysis.model_dump(mode="json"))},
            )

        assert parent.commit is not None
        shutil.rmtree(workdir, ignore_errors=True)
        # a copy of the parent's verified export (same bytes and modes as its commit)
        shutil.copytree(self._clean_export(parent), workdir, symlinks=True)
        mctx = MutateContext(
            self.view,
            self._rng(cid, "mutate"),
            generation,
            cid,
            pview,
            workdir,
            rollout,
            analysis,
            self.view.lessons,
            self.surface.include,
            self.surface.exclude,
        )
        mutation = self._call(cid, "mutate", lambda: self.mutate_op.mutate(mctx), Mutation)
        if mutation.usage.tokens or mutation.usage.cost:
            self._append("usage", {"id": cid, "slot": "mutate", **mutation.usage.model_dump()})

        # guardrail: the actual tree diff against the surface (framework-owned)
        self.progress.stage(cid, "guardrail")
        snap = snapshot(workdir, self.recipe.surface.ignore)
        report = guardrail_check(self.repo.flat_tree(parent.commit), snap, self.surface)
        changes = [_change_dict(ch) for ch in report.changes]
        if not report.ok:
            self._reject(
                cid,
                "guardrail",
                [f"{v.reason}: {v.path}" for v in report.violations],
                snap,
                parent,
                mutation,
                violations=[v.as_dict() for v in report.violations],
            )
            return
        if not report.changes:
            self._reject(cid, "mutate", ["the mutation changed nothing"], None, parent, mutation)
            return
        validated: Check | None = None
        if self.validate_op is not None:
            vop = self.validate_op
            vctx = ValidateContext(
                self.view, self._rng(cid, "validate"), generation, cid, pview, workdir, changes
            )
            check = validated = self._call(cid, "validate", lambda: vop.validate(vctx), Check)
            if not check.ok:
                self._reject(
                    cid,
                    "validate",
                    [check.reason],
                    snap,
                    parent,
                    mutation,
                    output=check.output,
                    validated=check,
                )
                return
            snap = snapshot(workdir, self.recipe.surface.ignore)
            again = guardrail_check(self.repo.flat_tree(parent.commit), snap, self.surface)
            if not again.ok:  # validate commands must not change the tree
                self._reject(
                    cid,
                    "validate",
                    ["the validate step changed the tree"],
                    snap,
                    parent,
                    mutation,
                    violations=[v.as_dict() for v in again.violations],
                )
                return
        tree = self.repo.store(snap)
        if self.novelty_op is not None:
            nop = self.novelty_op
            nctx = NoveltyContext(
                self.view, self._rng(cid, "novelty"), generation, cid, pview, tree, changes
            )
            check = self._call(cid, "novelty", lambda: nop.novelty(nctx), Check)
            if not check.ok:
                self._reject(cid, "novelty", [check.reason], snap, parent, mutation)
                return
        commit = self.repo.commit(
            tree,
            parent.commit,
            f"{cid}: {mutation.description}",
            f"{CANDIDATE_REFS}/{cid}",
            entries=snap.entries,
        )
        details = self.archive.put_json(mutation.model_dump(mode="json"))
        self._append(
            "candidate_mutated",
            {
                "id": cid,
                "commit": commit,
                "tree": tree,
                "parent_commit": parent.commit,
                "description": mutation.description,
                "changes": changes,
                "mutation": details,
                "sandbox": _sandboxes(mutation, validated),
            },
        )

    def _rollout(self, cid: str, parent: Candidate, generation: int) -> Rollout:
        train = self.task_lock.split["train"]

        def run_train(task_ids: list[str] | None = None) -> list[dict[str, Any]]:
            ids = [t for t in (task_ids or train) if t in train]
            assert parent.commit is not None
            self.task_lock.check(("train",))
            out = self._run_tasks(
                cid, "rollout", self._clean_export(parent), ids, **self._model_hooks(cid, "rollout")
            )
            return [
                {
                    "task": r.task_id,
                    "reward": r.reward,
                    "error": r.error,
                    "trajectory": r.trajectory_digest,
                    **_tails(r),
                }
                for r in sorted(out.runs.values(), key=lambda r: r.task_id)
            ]

        ctx = RolloutContext(
            self.view,
            self._rng(cid, "rollout"),
            generation,
            as_view(parent),
            run_train,
            list(train),
        )
        rollout = self._call(cid, "rollout", lambda: self.rollout_op.rollout(ctx), Rollout)
        digest = self.archive.put_json(rollout.model_dump(mode="json"))
        self._append("rollout_done", {"id": cid, "rollout": digest, "reused": rollout.reused})
        return rollout

    def _reject(
        self,
        cid: str,
        stage: str,
        reasons: list[str],
        snap: Snapshot | None,
        parent: Candidate,
        mutation: Mutation,
        *,
        violations: list[dict] | None = None,
        output: str = "",
        validated: Check | None = None,
    ) -> None:
        evidence = None
        if snap is not None and not snap.problems:
            # keep what the mutation produced, under a ref of its own, as evidence
            tree = self.repo.store(snap)
            evidence = self.repo.commit(
                tree,
                parent.commit,
                f"{cid} (rejected): {mutation.description}",
                f"{REJECTED_REFS}/{cid}",
            )
        self._append(
            "candidate_rejected",
            {
                "id": cid,
                "stage": stage,
                "reasons": reasons,
                "violations": violations or [],
                "commit": evidence,
                "description": mutation.description,
                "output": output[-4000:],
                "sandbox": _sandboxes(mutation, validated),
            },
        )

    # -- evaluation (framework-owned) ----------------------------------------------

    def _model_hooks(self, cid: str, split: str, attempt: int = 0) -> dict[str, Any]:
        """Evaluator hooks of a D/T/H build: record the model built, charge the tokens."""
        if self.evaluator.builder is None:
            return {}  # no build, no model, no tokens

        def on_built(model: dict[str, Any]) -> None:
            if split != "rollout":
                self._append(
                    "model_built", {"id": cid, "split": split, "attempt": attempt, "model": model}
                )

        def on_usage(usage: dict[str, int]) -> None:
            if usage.get("total_tokens"):
                data = {"id": cid, "slot": "evaluate", "split": split, "attempt": attempt}
                self._append("usage", {**data, "tokens": usage["total_tokens"], **usage})

        return {
            "on_built": on_built,
            "on_usage": on_usage,
            "token_limit": self.budget.tokens_left(self.state),
        }

    def _run_tasks(
        self,
        cid: str,
        split: str,
        candidate_dir: Path,
        task_ids: list[str],
        on_task: Callable[[TaskRun], None] | None = None,
        **hooks: Any,
    ) -> EvaluationOutput:
        done = 0
        self.progress.tasks(cid, split, 0, len(task_ids))

        def on_done(run: TaskRun) -> None:
            nonlocal done
            done += 1
            if on_task is not None:
                on_task(run)
            self.progress.tasks(cid, split, done, len(task_ids))

        put = self.archive.put
        out = run_tasks(
            self.evaluator, self.taskset, candidate_dir, task_ids, put, on_done, **hooks
        )
        self.timings.add(self.timings.tasks, cid, out.task_seconds)
        return out

    def _evaluate(self, c: Candidate, split: str, reserved: bool = False) -> str | None:
        refusal = self.budget.refuse_evaluation(self.state, reserved=reserved or split == "sealed")
        if refusal is not None:
            if reserved:
                return None
            return self._finish("budget_exhausted", refusal)
        self.task_lock.check((split,))
        attempt = len(c.attempts.get(split, [])) + 1
        self._append("evaluation_started", {"id": c.id, "split": split, "attempt": attempt})
        t0 = time.perf_counter()
        faults.reached("stage:evaluate")
        self.progress.stage(c.id, f"evaluate {split}")
        started = time.time()
        try:
            assert c.commit is not None and c.tree is not None
            dest = self._clean_export(c)
            ids = self.task_lock.split[split]

            def evidence(run: TaskRun) -> None:
                # as each task ends, so an interrupted attempt keeps what it produced
                self._append(
                    "task_finished",
                    {
                        "id": c.id,
                        "split": split,
                        "attempt": attempt,
                        "task": run.task_id,
                        "reward": run.reward,
                        "error": run.error,
                        "trajectory": run.trajectory_digest,
                    },
                )

            hooks = self._model_hooks(c.id, split, attempt)
            out = self._run_tasks(c.id, split, dest, ids, on_task=evidence, **hooks)
            rewards = {t: out.runs[t].reward for t in ids}
            predicate = EvaluationPredicate(
                run_id=self.state.run_id,
                candidate=c.id,
                parent_commit=c.parent_commit,
                recipe_digest=self.state.recipe_digest,
                evaluator_fingerprint=self.state.evaluator_fingerprint,
                taskset_fingerprint=self.task_lock.fingerprint,
                split=split,
                attempt=attempt,
                rewards=rewards,
                errors={t: r.error for t, r in out.runs.items() if r.error},
                trajectories={t: out.runs[t].trajectory_digest for t in ids},
                score=aggregate(rewards),
                isolation=self.evaluator.isolation,
                model=out.model,
                code=opcode.certified_code(self.paths.recipe_lock),
                framework_version=__version__,
                started_at=started,
                finished_at=time.time(),
            )
            envelope = self.signer.sign(make_statement(c.commit, c.tree, predicate))
            self._append(
                "evaluation_certified",
                {"id": c.id, "split": split, "attempt": attempt, "envelope": envelope},
            )
        except BuildRejected as exc:  # the candidate's own build failed: it ends rejected
            where = {"id": c.id, "split": split, "attempt": attempt}
            self._append("evaluation_failed", {**where, "error": str(exc), "build": exc.details})
            self._append(
                "candidate_rejected",
                {
                    "id": c.id,
                    "stage": exc.stage,
                    "reasons": [exc.reason],
                    "commit": c.commit,
                    "description": c.description,
                    "details": exc.details,
                },
            )
        except Exception as exc:  # infrastructure failure: evidence kept, explicit retry
            trace = self.archive.put("".join(traceback.format_exception(exc)).encode())
            self._append(
                "evaluation_failed",
                {
                    "id": c.id,
                    "split": split,
                    "attempt": attempt,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": trace,
                },
            )
        finally:
            self.timings.add(self.timings.total, c.id, time.perf_counter() - t0)
        return None

    def _clean_export(self, c: Candidate) -> Path:
        """The candidate's tree, exported once and re-checked against its hash before each use."""
        assert c.commit is not None
        dest = self.paths.work / "exports" / c.id
        if dest.is_dir():
            got = snapshot(dest, ignore=())
            if not got.problems and got.tree_sha == c.tree:
                return dest
        fresh_dir(dest)
        self.repo.export(c.commit, dest)
        kept = sorted(dest.parent.iterdir(), key=lambda p: p.stat().st_mtime)
        for old in kept[:-KEEP_EXPORTS]:
            shutil.rmtree(old, ignore_errors=True)
        return dest

    def _drop_export(self, c: Candidate) -> None:
        shutil.rmtree(self.paths.work / "exports" / c.id, ignore_errors=True)

    # -- gate, record, reflect --------------------------------------------------------

    def _gate(self, c: Candidate) -> None:
        t0 = time.perf_counter()
        if c.is_seed:
            decision = GateDecision(admit=True, reason="seed (anchor)")
        else:
            assert c.parent is not None
            parent = self.state.candidates[c.parent]
            ctx = GateContext(
                self.view, self._rng(c.id, "gate"), c.generation, as_view(c), as_view(parent)
            )
            try:
                decision = self._call(c.id, "gate", lambda: self.gate_op.gate(ctx), GateDecision)
            except OperatorFailed as exc:
                decision = GateDecision(admit=False, reason=str(exc))
        self._append(
            "candidate_gated", {"id": c.id, "admit": decision.admit, "reason": decision.reason}
        )
        if not decision.admit:  # admitted candidates stay exported: they may be parents
            self._drop_export(c)
        self.timings.add(self.timings.total, c.id, time.perf_counter() - t0)

    def _record(self, c: Candidate) -> None:
        t0 = time.perf_counter()
        parent = self.state.candidates.get(c.parent) if c.parent else None
        assert c.decision is not None
        decision = GateDecision(admit=c.decision["admit"], reason=c.decision["reason"])
        ctx = RecordContext(
            self.view,
            self._rng(c.id, "record"),
            c.generation,
            as_view(c),
            as_view(parent) if parent else None,
            decision,
            c.changes,
        )
        try:
            notes = self._call(c.id, "record", lambda: self.record_op.record(ctx), Notes).notes
        except OperatorFailed as exc:
            notes = {"error": str(exc)}
        self._append("candidate_recorded", {"id": c.id, "notes": notes})
        self.timings.add(self.timings.total, c.id, time.perf_counter() - t0)

    def _reflect(self, generation: int) -> None:
        op = self.reflect_op
        assert op is not None
        members = [
            as_view(c)
            for c in self.state.candidates.values()
            if c.generation == generation and not c.is_seed
        ]
        ctx = ReflectContext(
            self.view,
            self._rng(f"g{generation}", "reflect"),
            generation,
            self.view.lessons,
            members,
        )
        key = f"g{generation}"
        try:
            lessons = self._call(key, "reflect", lambda: op.reflect(ctx), Reflection).lessons
        except OperatorFailed as exc:
            self.progress.note(str(exc))
            lessons = self.view.lessons
        self._append(
            "generation_reflected",
            {"generation": generation, "lessons": self.archive.put(lessons.encode())},
        )


class RunFailure(Exception):
    """The run cannot go on (e.g. select chose a non-admitted parent)."""


def _failure_reason(exc: Exception) -> str:
    """A failed run's reason: the message of a known failure, the repr of anything else (a bug)."""
    if isinstance(exc, RunFailure | RsiError):
        return str(exc)
    return f"internal error: {exc!r}"


def _tails(run: TaskRun) -> dict[str, str]:
    agent = run.trajectory.get("agent", {})
    return {k: agent.get(k, "") for k in ("stdout_tail", "stderr_tail")}


def _sandboxes(mutation: Mutation, check: Check | None) -> dict[str, Any]:
    """How the mutate (and validate) operators were confined, for the candidate's event."""
    used = {"mutate": mutation.sandbox, "validate": check.sandbox if check else None}
    return {slot: u.model_dump(mode="json") for slot, u in used.items() if u is not None}


def _change_dict(ch: Any) -> dict[str, Any]:
    d = {"kind": ch.kind, "path": ch.path}
    if ch.old_path:
        d["old_path"] = ch.old_path
    return d


def _event_signer(signer: Signer) -> Callable[[bytes], str]:
    return lambda payload: signer.sign_bytes(EVENT_TYPE, payload)


def _make_evaluator(resolved: recipe_mod.ResolvedRecipe, work: Path) -> LocalEngine:
    _config_cls, factory = ENGINES[resolved.recipe.evaluator.engine]
    return factory(resolved.evaluator_config, work)


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


def _check_evaluator(paths: RunPaths, evaluator: LocalEngine, st: RunState) -> None:
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


__all__ = ["SPLITS", "Engine", "OperatorFailed", "Progress", "RunFailure"]
