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

import os
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
from rsiframe.inflight import Closure, Inflight
from rsiframe.opcall import OperatorCalls, OperatorFailed, Progress, Timings
from rsiframe.review import gate, record, reflect
from rsiframe.runstart import RunParts, create_run, open_run
from rsiframe.runview import StateView
from rsiframe.sandbox import kill_all
from rsiframe.state import Candidate
from rsiframe.surface import Surface
from rsiframe.tasks import SPLITS, tasks_by_split
from rsiframe.transaction import RunFailure, Transaction
from rsiframe.untrusted import UntrustedOperator


def _candidate_id(n: int) -> str:
    return f"c{n:04d}"


#: what a step returns when nothing can start until work in flight comes back
WAIT = "wait"
#: slots whose calls, in generational mode, see the state as the child's generation began
TRANSACTION_SLOTS = frozenset({"select", "rollout", "analyze", "mutate", "validate", "novelty"})
#: outcomes kept when they come back after Ctrl-C (failures there are the interrupt's doing)
_KEPT_WHEN_STOPPING = (E.CandidateMutated, FinishedEvaluation)


def grace_seconds() -> float:
    """How long Ctrl-C waits for work in flight before killing its sandboxes."""
    try:
        return max(0.0, float(os.environ.get("RSIFRAME_GRACE_S", "10")))
    except ValueError:
        return 10.0


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
        self._retried: set[tuple[str, str]] = set()
        conc = self.recipe.concurrency
        self.generational = conc.mode == "generational"
        self.inflight = Inflight(conc.candidates)
        self.evaluator.parallel = self.tasks.share = conc.candidates
        self._generation_of: dict[str, int] = {}  # children proposed by this process
        self.calls.horizon = self._horizon
        self._closed: set[int] = set()  # generations the budget closed early
        self._stopping = False
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
        self.evaluator.close()
        self.archive.close()
        self.repo.close()
        shutil.rmtree(self.paths.work, ignore_errors=True)
        self.lock.release()

    # -- the one writer -------------------------------------------------------------

    def emit(self, event: E.EventData) -> Event | None:
        """Append one event and fold it: only the models of ``events.py`` are written.

        On a worker thread the event goes to the writer's inbox instead (None returned):
        exactly one thread appends and folds, whatever the candidates in flight.
        """
        if not self.inflight.on_writer():
            self.inflight.post(lambda: self._append(event))
            return None
        return self._append(event)

    def _append(self, event: E.EventData) -> Event:
        return self.archive.append(event.type, E.payload(event))

    def _on_event(self, ev: Event) -> None:
        with self.view.lock:  # operators' reads copy under it; never held during their work
            self.state.apply(ev)
        self._progress.event(ev, self.state)

    def _horizon(self, cid: str, slot: str) -> int | None:
        """Generational mode: a child's transaction sees the state as its generation began."""
        if not self.generational or slot not in TRANSACTION_SLOTS:
            return None
        return self._generation_of.get(cid)

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
                idle = 0
                while True:
                    self.inflight.drain()
                    outcome = self._step()
                    if outcome == WAIT and self.inflight.jobs:
                        self.inflight.drain(timeout=0.5)
                    elif outcome == WAIT:
                        idle += 1  # nothing in flight: the next step must move
                        if idle > 2:
                            raise RuntimeError("the scheduler stalled with nothing in flight")
                    elif outcome is not None:
                        return outcome
                    else:
                        idle = 0
            except KeyboardInterrupt:
                self._wind_down(grace_seconds())
                self.emit(E.RunInterrupted(reason="interrupted by the user"))
                raise
        except Exception as exc:  # the run stays resumable; the caller reports the error
            self._wind_down(0.0)
            self.emit(E.RunFinished(state="failed", reason=_failure_reason(exc)))
            raise

    def _wind_down(self, grace: float) -> None:
        """Start nothing new; take back what finishes within ``grace`` seconds, then kill
        the sandboxes of what is still in flight (its attempts re-run on resume)."""
        self._stopping = True
        deadline = time.monotonic() + grace
        try:
            while self.inflight.jobs and time.monotonic() < deadline:
                self.inflight.drain(timeout=min(0.2, max(0.01, deadline - time.monotonic())))
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: stop waiting
        except Exception:  # a failing worker's error is the next session's business
            pass
        if self.inflight.jobs:
            kill_all()

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
        busy = self.inflight.jobs
        for c in st.candidates.values():
            if c.id in busy:
                continue
            s = c.state
            if s in ("mutated", "evaluating"):
                if not self.inflight.free():
                    continue
                split = c.next_split()
                assert split is not None
                return self._evaluate(c, split)
            if s == "failed" and self.retry_failed and self.inflight.free():
                split = c.next_split()
                if split is not None and (c.id, split) not in self._retried:
                    self._retried.add((c.id, split))
                    return self._evaluate(c, split)
            if s == "certified" and self._may_review(c):
                self._timed(c, self._gated)
                return None
            if s in ("admitted", "declined") and not c.recorded and self._may_review(c):
                self._timed(c, self._recorded)
                return None
        if seed.state != "admitted":
            if busy or seed.state in ("mutated", "evaluating", "certified"):
                return WAIT
            reason = "the seed could not be evaluated"
            errors = [
                a.error
                for s in seed.required_splits
                if (a := seed.latest(s)) is not None and a.error
            ]
            if errors:
                reason += f": {errors[0].splitlines()[0]}"
            return self._finish("failed", reason + " (fix it, then resume --retry-failed)")
        return self._grow()

    def _grow(self) -> str | None:
        """Reflect, start a generation or propose a child: whichever is due."""
        st = self.state
        g = st.generation
        full = g == 0 or st.proposed_in.get(g, 0) >= self.recipe.children_per_generation
        closed = g in self._closed  # the budget stopped this generation's proposals
        if (full or closed) and self.generational and self._unsettled(g):
            return WAIT
        if closed and not self.inflight.jobs and not self._unsettled(None):
            refusal = self.budget.refuse_candidate(st)
            if refusal is not None:
                return self._finish("budget_exhausted", refusal)
            self._closed.discard(g)  # rejected children gave their evaluations back
            closed = False
        for h in sorted(set(range(1, g + 1)) - set(st.reflected)):
            if self.calls.op("reflect") is None or self._unsettled(h) or (h == g and not full):
                break
            self.emit(reflect(self.calls, st, h, self.archive.put))
            return None
        if full:
            refusal = self.budget.refuse_generation(st)
            if refusal is not None:
                if self.inflight.jobs or self._unsettled(None):
                    return WAIT  # steady: what is in flight ends first
                limit = self.recipe.budget.max_generations
                if limit is not None and g >= limit:
                    return self._finish("finished", f"completed {g} generation(s)")
                return self._finish("budget_exhausted", refusal)
            self.emit(E.GenerationStarted(generation=g + 1))
            return None
        if closed or self._stopping or not self.inflight.free():
            return WAIT
        refusal = self.budget.refuse_candidate(st)
        if refusal is not None:
            if self.inflight.jobs or self._unsettled(None):
                self._closed.add(g)  # no more children until what is in flight settles
                return WAIT
            return self._finish("budget_exhausted", refusal)
        self._propose_child(g)
        return None

    def _unsettled(self, generation: int | None) -> bool:
        """Whether a child of ``generation`` (None: any) is still in flight or unreviewed."""
        for c in self.state.candidates.values():
            if c.is_seed or (generation is not None and c.generation != generation):
                continue
            s = c.state
            if c.id in self.inflight.jobs or s in ("proposed", "mutated", "evaluating"):
                return True
            if s == "certified" or (s in ("admitted", "declined") and not c.recorded):
                return True
        return False

    def _may_review(self, c: Candidate) -> bool:
        """Generational mode gates a generation's children in candidate order, once all
        of them are certified (or rejected or failed); steady mode as each one is."""
        if not self.generational or c.is_seed:
            return True
        g = c.generation
        full = self.state.proposed_in.get(g, 0) >= self.recipe.children_per_generation
        if not full and g not in self._closed and g == self.state.generation:
            return False
        for o in self.state.candidates.values():
            busy = o.id in self.inflight.jobs or o.state in ("proposed", "mutated", "evaluating")
            if o.generation == g and not o.is_seed and busy:
                return False
        return True

    def _tidy(self) -> bool:
        """Close what an earlier process left open; True if it appended anything."""
        for c in self.state.candidates.values():
            if c.id in self.inflight.jobs:
                continue
            if c.state == "proposed" and not c.is_seed:
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
            self._evaluate(champ, "sealed", reserved=True, wait=True)
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
        """Select on the writer, then mutate on a worker; the outcome comes back here."""
        cid = _candidate_id(len(self.state.candidates))
        self._generation_of[cid] = generation
        t0 = time.perf_counter()
        self.emit(self.transaction.select(self.state, cid, generation))
        parent = self.state.candidates[self.state.candidates[cid].parent or ""]
        workdir = self.paths.work / f"mutate-{cid}"

        def work() -> Closure:
            try:
                with self.repo.holding(parent.id):
                    outcome = self.transaction.run(cid, parent, generation, workdir)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
                self.timings.add(self.timings.total, cid, time.perf_counter() - t0)
            return lambda: self._take_back(outcome)

        self.inflight.start(cid, "mutate", work)

    def _take_back(self, outcome: E.EventData | FinishedEvaluation | list[E.EventData]) -> None:
        """Record what a worker returns; after Ctrl-C only successes are kept (a failure
        then is the interrupt's doing: the attempt re-runs, the mutation is abandoned)."""
        if self._stopping and not isinstance(outcome, _KEPT_WHEN_STOPPING):
            return
        if isinstance(outcome, FinishedEvaluation):
            self.emit(certify(outcome, self._binding(), self.signer))
        elif isinstance(outcome, list):
            for ev in outcome:
                self.emit(ev)
        else:
            self.emit(outcome)

    # -- evaluation: decided and certified here, run by evaluation.evaluate ----------

    def _evaluate(
        self, c: Candidate, split: str, reserved: bool = False, wait: bool = False
    ) -> str | None:
        """Start one attempt on a worker (``wait``: on this thread, e.g. the sealed one)."""
        refusal = self.budget.refuse_evaluation(self.state, reserved=reserved or split == "sealed")
        if refusal is not None:
            if reserved:
                return None
            if self.inflight.jobs:
                return WAIT  # the budget ends the run once what is in flight settles
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

        def work() -> Closure:
            try:
                with self.repo.holding(c.id):
                    result = evaluate(job, self.tasks)  # the unit a worker runs
            finally:
                self.timings.add(self.timings.total, c.id, time.perf_counter() - t0)
            return lambda: self._take_back(result)

        if wait:
            work()()
        else:
            self.inflight.start(c.id, f"evaluate {split}", work)
        return None

    def _binding(self) -> Binding:
        st = self.state
        return Binding(
            run_id=st.run_id,
            recipe_digest=st.recipe_digest,
            evaluator_fingerprint=st.evaluator_fingerprint,
            taskset_fingerprint=self.task_lock.fingerprint,
            isolation=self.evaluator.isolation,
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
