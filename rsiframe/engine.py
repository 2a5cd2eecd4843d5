"""The engine: drives one run through candidate transactions, from events and back to events.

::

    select -> rollout -> [analyze] -> mutate -> guardrail -> [validate] -> [novelty]
      -> commit -> EVALUATE (train, gate) -> gate -> record -> [reflect per generation]

Every step derives what to do next from the folded state, so ``run`` and
``resume`` are the same loop: stale proposals are abandoned, open evaluations
are marked interrupted and retried as a new attempt, committed candidates are
evaluated, certified ones gated, gated ones recorded. The steps live in their own
modules (:mod:`~rsiframe.transaction`, :mod:`~rsiframe.evaluation` with
:func:`~rsiframe.certify.certify`, :mod:`~rsiframe.review`) and return events; the
engine decides what runs next and is the run's one writer (:meth:`Engine.emit`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from rsiframe import events as E
from rsiframe.archive import Event
from rsiframe.budget import BudgetGuard
from rsiframe.certify import Binding, FinishedEvaluation, certify
from rsiframe.errors import RsiError
from rsiframe.evaluation import Job, TaskRunner, evaluate
from rsiframe.opcall import OperatorCalls, OperatorFailed, Progress, Timings
from rsiframe.review import gate, record, reflect
from rsiframe.runstart import RunParts, create_run, open_run
from rsiframe.runview import StateView
from rsiframe.snapshot import save_snapshot
from rsiframe.state import Candidate
from rsiframe.surface import Surface
from rsiframe.tasks import SPLITS, tasks_by_split
from rsiframe.transaction import RunFailure, Transaction
from rsiframe.untrusted import UntrustedOperator


def _candidate_id(n: int) -> str:
    return f"c{n:04d}"


class Engine:
    """Drives one run. Build it with :meth:`create` (new run) or :meth:`open` (resume)."""

    def __init__(self, parts: RunParts, retry_failed: bool = False, resumed: bool = False) -> None:
        self.paths = parts.paths
        self.resolved = parts.resolved
        self.recipe = parts.resolved.recipe
        self.state = parts.state
        self.archive = parts.archive
        self.signer = parts.signer
        self.task_lock = parts.task_lock
        self.taskset = parts.taskset
        self.evaluator = parts.evaluator
        # training data is audited against the gate and sealed items (D/T/H builds)
        self.evaluator.protect(tasks_by_split(parts.taskset, parts.task_lock.split))
        self.repo = parts.repo
        self.lock = parts.lock
        self.resumed = resumed
        self.retry_failed = retry_failed
        self.timings = Timings()
        self.budget = BudgetGuard(self.recipe.budget)
        self.view = StateView(
            self.state,
            self.repo,
            self.paths.root,
            gate_detail=self.recipe.information.gate_detail,
            on_violation=lambda v: self.emit(E.InformationFlowViolation(**v)),
        )
        ops = {slot: cls(config) for slot, (cls, config) in self.resolved.operators.items()}
        names = {slot: spec.operator for slot in ops if (spec := self.recipe.slots.get(slot))}
        self.calls = OperatorCalls(ops, names, self.view, self.recipe.random_seed, self.timings)
        self.tasks = TaskRunner(
            self.evaluator,
            self.taskset,
            self.archive.put,
            self.emit,
            self.repo.verified_export,
            self.budget,
            self.state,
            self.timings,
        )
        surface = Surface(tuple(self.recipe.surface.include), tuple(self.recipe.surface.exclude))
        self.transaction = Transaction(
            self.calls,
            self.repo,
            self.tasks,
            self.task_lock,
            surface,
            self.recipe.surface.ignore,
            self.archive.put,
            self.emit,
        )
        for op in ops.values():
            if isinstance(op, UntrustedOperator):  # its code comes from candidate trees
                op.sources = lambda cid: self.transaction.export(self.state.candidates[cid])
        self._live: set[str] = set()
        self._retried: set[tuple[str, str]] = set()
        self.archive.listeners.append(self._on_event)
        self._progress = Progress()

    @property
    def progress(self) -> Progress:
        return self._progress

    @progress.setter
    def progress(self, sink: Progress) -> None:
        self._progress = self.calls.progress = self.tasks.progress = sink

    # -- construction ---------------------------------------------------------------

    @classmethod
    def create(
        cls, recipe_path: Path, sets: list[str] | None = None, out: Path | None = None
    ) -> Engine:
        """Validate everything, then create the run folder, keys, locks and the seed commit."""
        parts, started = create_run(recipe_path, sets, out)
        engine = cls(parts)
        engine.emit(started)
        engine.emit(E.SessionStarted(resumed=False))
        return engine

    @classmethod
    def open(cls, root: Path, retry_failed: bool = False) -> tuple[Engine, list[str]]:
        """Re-verify archive and locks, then rebuild the engine of an existing run."""
        parts, notes = open_run(root)
        return cls(parts, retry_failed=retry_failed, resumed=True), notes

    def close(self) -> None:
        save_snapshot(self.paths.root, self.state, self.signer)  # perf: resume starts here
        self.evaluator.close()
        self.archive.close()
        self.repo.close()
        shutil.rmtree(self.paths.work, ignore_errors=True)
        self.lock.release()

    # -- the one writer -------------------------------------------------------------

    def emit(self, event: E.EventData) -> Event:
        """Append one event and fold it: only the models of ``events.py`` are written."""
        return self.archive.append(event.type, E.payload(event))

    def _on_event(self, ev: Event) -> None:
        self.state.apply(ev)
        self._progress.event(ev, self.state)

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
                self.emit(E.SessionStarted(resumed=True, retry_failed=self.retry_failed))
            try:
                while True:
                    outcome = self._step()
                    if outcome is not None:
                        return outcome
            except KeyboardInterrupt:
                self.emit(E.RunInterrupted(reason="interrupted by the user"))
                raise
        except Exception as exc:  # the run stays resumable; the caller reports the error
            self.emit(E.RunFinished(state="failed", reason=_failure_reason(exc)))
            raise

    def _step(self) -> str | None:
        st = self.state
        if self._tidy():
            return None
        seed = st.seed
        if seed is None:
            self.emit(E.CandidateProposed(id="c0000", parent=None, generation=0, reason="seed"))
            self._seed_mutated()
            return None
        if seed.commit is None:  # a crash between the seed's two events: its commit exists
            self._seed_mutated()
            return None
        for c in list(st.active.values()):  # perf: not every candidate, each step
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
                self._timed(c, self._gated)
                return None
            if s in ("admitted", "declined") and not c.recorded:
                self._timed(c, self._recorded)
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
        if g >= 1 and gen_full and self.calls.op("reflect") is not None and g not in st.reflected:
            self.emit(reflect(self.calls, st, g, self.archive.put))
            return None
        if gen_full:
            refusal = self.budget.refuse_generation(st)
            if refusal is not None:
                limit = self.recipe.budget.max_generations
                if limit is not None and g >= limit:
                    return self._finish("finished", f"completed {g} generation(s)")
                return self._finish("budget_exhausted", refusal)
            self.emit(E.GenerationStarted(generation=g + 1))
            return None
        refusal = self.budget.refuse_candidate(st)
        if refusal is not None:
            return self._finish("budget_exhausted", refusal)
        self._propose_child(g)
        return None

    def _tidy(self) -> bool:
        """Close what an earlier process left open; True if it appended anything."""
        for c in list(self.state.active.values()):  # perf: not every candidate, each step
            if c.state == "proposed" and c.id not in self._live and not c.is_seed:
                self.emit(E.CandidateAbandoned(id=c.id, reason="the mutation did not finish"))
                return True
            a = c.open_attempt()
            if a is not None:
                self.emit(E.EvaluationInterrupted(id=c.id, split=a.split, attempt=a.attempt))
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
        self.emit(E.RunFinished(state=state, reason=reason))
        return state

    def _timed(self, c: Candidate, step: Callable[[Candidate], None]) -> None:
        t0 = time.perf_counter()
        try:
            step(c)
        finally:
            self.timings.add(self.timings.total, c.id, time.perf_counter() - t0)

    # -- the seed and the children --------------------------------------------------

    def _seed_mutated(self) -> None:
        """The seed's commit (made with the run folder) is its mutation."""
        st = self.state
        self.emit(
            E.CandidateMutated(
                id="c0000", commit=st.seed_commit, tree=st.seed_tree, description="seed"
            )
        )

    def _propose_child(self, generation: int) -> None:
        cid = _candidate_id(len(self.state.candidates))
        t0 = time.perf_counter()
        self.emit(self.transaction.select(self.state, cid, generation))
        self._live.add(cid)
        workdir = self.paths.work / f"mutate-{cid}"
        try:
            parent = self.state.candidates[self.state.candidates[cid].parent or ""]
            self.emit(self.transaction.run(cid, parent, generation, workdir))
        finally:
            self._live.discard(cid)
            shutil.rmtree(workdir, ignore_errors=True)
            self.timings.add(self.timings.total, cid, time.perf_counter() - t0)

    # -- evaluation: decided and certified here, run by evaluation.evaluate ----------

    def _evaluate(self, c: Candidate, split: str, reserved: bool = False) -> str | None:
        refusal = self.budget.refuse_evaluation(self.state, reserved=reserved or split == "sealed")
        if refusal is not None:
            if reserved:
                return None
            return self._finish("budget_exhausted", refusal)
        self.task_lock.check((split,))
        assert c.commit is not None and c.tree is not None
        attempt = len(c.attempts.get(split, [])) + 1
        self.emit(E.EvaluationStarted(id=c.id, split=split, attempt=attempt))
        job = Job(
            c.id,
            c.commit,
            c.tree,
            c.parent_commit,
            split,
            attempt,
            self.task_lock.split[split],
            c.description,
        )
        t0 = time.perf_counter()
        try:
            result = evaluate(job, self.tasks)  # the part a worker could run
            if isinstance(result, FinishedEvaluation):
                self.emit(certify(result, self._binding(), self.signer))
            else:
                for ev in result:
                    self.emit(ev)
        finally:
            self.timings.add(self.timings.total, c.id, time.perf_counter() - t0)
        return None

    def _binding(self) -> Binding:
        st = self.state
        return Binding(
            run_id=st.run_id,
            recipe_digest=st.recipe_digest,
            evaluator_fingerprint=st.evaluator_fingerprint,
            taskset_fingerprint=self.task_lock.fingerprint,
            isolation=self.evaluator.isolation,
            evaluator=self.evaluator.record_part(),
        )

    def _gated(self, c: Candidate) -> None:
        decision = gate(self.calls, self.state, c)
        self.emit(decision)
        if not decision.admit:  # admitted candidates stay exported: they may be parents
            self.repo.drop_export(c.id)

    def _recorded(self, c: Candidate) -> None:
        self.emit(record(self.calls, self.state, c))


def _failure_reason(exc: Exception) -> str:
    """A failed run's reason: the message of a known failure, the repr of anything else (a bug)."""
    if isinstance(exc, RunFailure | RsiError):
        return str(exc)
    return f"internal error: {exc!r}"


__all__ = ["SPLITS", "Engine", "OperatorFailed", "Progress", "RunFailure"]
