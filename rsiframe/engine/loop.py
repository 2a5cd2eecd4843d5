"""The engine: drives one run through candidate transactions, from events and back to events.

::

    select -> rollout -> [analyze] -> mutate -> guardrail -> [validate] -> [novelty]
      -> commit -> EVALUATE (train, gate) -> gate -> record -> [reflect per generation]

Every step derives what to do next from the folded state, so ``run`` and ``resume``
are the same loop: stale proposals are abandoned, open evaluations are retried as a new
attempt, committed candidates evaluated, certified ones gated, gated ones recorded. The
steps live in their own modules (:mod:`~rsiframe.engine.transaction`,
:mod:`~rsiframe.engine.evaluation` with :func:`~rsiframe.engine.certify.certify`,
:mod:`~rsiframe.engine.review`) and return events; :mod:`~rsiframe.engine.scheduler` decides
what runs next with K candidates in flight on worker threads
(:mod:`~rsiframe.engine.inflight`); the engine is the one writer (:meth:`Engine.emit`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rsiframe.api import Operator
from rsiframe.archive import events as E
from rsiframe.archive.log import Event
from rsiframe.archive.snapshot import save_snapshot
from rsiframe.archive.state import Candidate
from rsiframe.engine.certify import Binding, FinishedEvaluation, certified_code, certify
from rsiframe.engine.duplicates import TreeClaims
from rsiframe.engine.evaluation import Job, Stages, TaskRunner, base_split, evaluate
from rsiframe.engine.hooks import Lifecycle, Notice, ProgressRelay
from rsiframe.engine.inflight import Closure, Inflight
from rsiframe.engine.preflight import warnings as preflight_warnings
from rsiframe.engine.review import gate, record, reflect
from rsiframe.engine.runstart import RunParts, create_run, open_run
from rsiframe.engine.scheduler import WAIT, Scheduler, candidate_id, grace_seconds, seed_failure
from rsiframe.engine.startwarnings import start_warnings
from rsiframe.engine.taskruns import TaskRunMeter, budget_guard
from rsiframe.engine.transaction import RunConverged, RunFailure, Transaction, failure_reason
from rsiframe.evaluators import health
from rsiframe.executors.base import Executor
from rsiframe.gateway.runmodels import RunModels, budget_refusal
from rsiframe.slots.calls import OperatorCalls, OperatorFailed, Progress, Timings
from rsiframe.slots.runview import StateView
from rsiframe.slots.untrusted import make_operator
from rsiframe.surface import Surface
from rsiframe.tasks.taskset import SPLITS, tasks_by_split
from rsiframe.util import reaper
from rsiframe.util.spares import Spares

#: mutation folders set aside for the next candidates (one per candidate in flight, or more)
MUTATE_SPARES = 8


class Engine:
    """Drives one run. Build it with :meth:`create` (new run) or :meth:`open` (resume)."""

    def __init__(self, parts: RunParts, retry_failed: bool = False, resumed: bool = False) -> None:
        self.paths = parts.paths
        self.resolved = parts.resolved
        self.recipe = r = parts.resolved.recipe
        self.state = parts.state
        self.archive = parts.archive
        self.signer = parts.signer
        self.task_lock = parts.task_lock
        self.taskset = parts.taskset
        self.evaluator = parts.evaluator
        # training data is audited against the gate and sealed items (D/T/H builds)
        self.evaluator.protect(tasks_by_split(parts.taskset, parts.task_lock.split))
        self.repo = parts.repo
        # candidates' mutation folders, set aside to be rewritten as the next ones
        self.workdirs = Spares(self.paths.work, "mutate-spare", MUTATE_SPARES)
        self.lock = parts.lock
        self.hooks = parts.hooks
        self.resumed = resumed
        self.retry_failed = retry_failed
        self._retried: set[tuple[str, str]] = set()
        self.timings = Timings()
        self.relay = ProgressRelay(self.state)  # where progress goes (show_progress)
        self.stages = Stages.of(r, self.task_lock.split)  # staged evaluation (#15)
        self.inflight = Inflight(
            r.concurrency.candidates, parts.executor.cancel_all, self.archive.sync
        )
        #: each candidate's newest event (seq): what its gate's sync point must cover
        self._newest_event_of: dict[str, int] = {}
        self.view = StateView(
            self.state,
            self.repo,
            self.paths.root,
            gate_detail=r.information.gate_detail,
            on_violation=self._violated,
        )
        ops = {
            slot: make_operator(cls, config, self._export_of)
            for slot, (cls, config) in self.resolved.operators.items()
        }
        self.budget = budget_guard(r.budget, self.stages, ops)  # task runs too
        self.sched = Scheduler(r, self.state, self.budget, self.inflight, "reflect" in ops)
        self.pings = parts.pings  # the models' check, recorded once the session has begun
        # the duplicate rule: the earlier proposal keeps a tree in generational mode
        self.claims = TreeClaims(self.state, ordered=self.sched.generational)
        self.models = self._start_models()  # the run's gateway process (issue 13), or None
        self.calls = self._operator_calls(ops)
        self.tasks = self._task_runner(parts.executor)
        # charges minibatch and rollout task runs (max_task_runs)
        self.meter = TaskRunMeter(
            self.tasks, self.budget, self.emit, self.archive.sync, self.inflight
        )
        self.transaction = self._transaction()
        self._add_hooks()
        if self.models is not None:  # calls recorded after an earlier driver died, folded
            self.models.drain()

    def _start_models(self) -> RunModels | None:
        try:
            return RunModels.start(
                self.paths.root,
                self.recipe,
                self.state,
                self.emit,
                self.archive.put,
                held=self.budget.anchor_hold(self.state),
            )
        except BaseException:
            self.lock.release()
            raise

    def _operator_calls(self, ops: dict[str, Operator]) -> OperatorCalls:
        r = self.recipe
        return OperatorCalls(
            ops,
            {slot: spec.operator for slot in ops if (spec := r.slots.get(slot))},
            self.view,
            r.random_seed,
            self.timings,
            progress=self.relay,
            horizon=self.sched.horizon,
            models=self._model_scope if self.models is not None else None,
            draws=self._draws_of,
        )

    def _draws_of(self, cid: str) -> str:
        """The candidate whose draws (RNG, model requests) ``cid``'s operator calls repeat:
        a cut proposal's, for the proposal that retakes it; its own otherwise."""
        c = self.state.candidates.get(cid)
        return c.draws if c is not None and c.draws else cid

    def _model_scope(self, cid: str, slot: str, config: Any) -> Any:
        assert self.models is not None
        return self.models.scope(cid, slot, config, draws=self._draws_of(cid))

    def _task_runner(self, executor: Executor) -> TaskRunner:
        return TaskRunner(
            self.evaluator,
            self.taskset,
            self.archive.put,
            self.emit,
            self.repo.verified_export,
            self.budget,
            self.state,
            self.timings,
            executor,  # where evaluations run this session (issue 11.3)
            self.models,  # an evaluation's agent reaches its model through the gateway
            share=self.recipe.concurrency.candidates,
            progress=self.relay,
        )

    def _transaction(self) -> Transaction:
        r = self.recipe
        return Transaction(
            self.calls,
            self.repo,
            self.tasks,
            self.task_lock,
            Surface(tuple(r.surface.include), tuple(r.surface.exclude)),
            r.surface.ignore,
            self.archive.put,
            self.emit,
            self.meter,
            self.claims,
            splits=self.stages.splits,
            merge_rate=getattr(r.slots.get("merge"), "rate", 0.0),
            outage_of=self.models.outage_of if self.models is not None else _no_outage,
        )

    def _add_hooks(self) -> None:
        """The run's lifecycle hooks, in the order they run for one event: the fold first
        (every other hook reads the folded state), then progress, then the meters."""
        self.hooks.add_hook(Lifecycle.EVENT_WRITTEN, self._fold)
        self.hooks.add_hook(Lifecycle.EVENT_WRITTEN, self.relay.on_event)
        self.hooks.add_hook(Lifecycle.EVENT_WRITTEN, self.claims.on_event)
        self.hooks.add_hook(Lifecycle.TASK_RUNS_CHARGED, self.meter.on_charged)
        self.hooks.add_hook(Lifecycle.MODEL_TOKENS_SPENT, self.tasks.on_tokens_spent)
        if self.models is not None:
            self.hooks.add_hook(Lifecycle.MODEL_TOKENS_SPENT, self.models.on_tokens_spent)
            self.hooks.add_hook(Lifecycle.EVALUATION_TOKENS, self._hold_for_anchor)

    def _hold_for_anchor(self, notice: Notice) -> None:
        """Keep the gateway's hold for the champion's sealed evaluation at the budget's:
        the anchor's tasks at the most tokens per task an evaluation spent so far."""
        assert self.models is not None
        self.models.hold(self.budget.anchor_hold(self.state))

    def _violated(self, violation: dict[str, Any]) -> None:
        """An operator read beyond its view: recorded at once, even if it swallows the error."""
        self.emit(E.InformationFlowViolation(**violation))

    def _export_of(self, cid: str) -> Path:
        """The verified export of a candidate's tree (a candidate-carried operator's code)."""
        return self.transaction.export(self.state.candidates[cid])

    def show_progress(self, sink: Progress) -> None:
        """Report what the run is doing to ``sink`` from now on (the CLI's live view)."""
        self.relay.show(sink)

    # -- construction ---------------------------------------------------------------

    @classmethod
    def create(
        cls,
        recipe_path: Path,
        sets: list[str] | None = None,
        out: Path | None = None,
        ray_address: str | None = None,
        unsets: list[str] | None = None,
        replay_of: Path | None = None,
        method: str | Path | None = None,
        model_check: bool = True,
    ) -> Engine:
        """Validate everything (with ``model_check``, each declared model answers one tiny
        call), then create the run folder, keys, locks and the seed commit (``method``: the
        recipe's target run with that method)."""
        parts, started = create_run(
            recipe_path, sets, out, ray_address, unsets, replay_of, method, model_check
        )
        engine = cls(parts)
        warned = [
            *preflight_warnings(engine.resolved),
            *start_warnings(engine.calls.ops, engine.recipe, engine.task_lock.split),
        ]
        engine.emit(started.model_copy(update={"warnings": warned}))
        engine.emit(E.SessionStarted(resumed=False))
        engine._record_check()
        return engine

    @classmethod
    def open(
        cls,
        root: Path,
        retry_failed: bool = False,
        ray_address: str | None = None,
        *,
        model_check: bool = True,
        say: Callable[[str], None] = lambda line: None,
    ) -> tuple[Engine, list[str]]:
        """Re-verify archive and locks, then rebuild the engine of an existing run (what a
        killed driver left running is settled first: ``say`` tells how)."""
        parts, notes = open_run(root, ray_address, model_check=model_check, say=say)
        return cls(parts, retry_failed=retry_failed, resumed=True), notes

    def _record_check(self) -> None:
        """The models' check of this session, metered apart from the run's budget."""
        if self.pings:
            self.emit(E.ModelsChecked(checks=[p.as_row() for p in self.pings]))
            self.pings = []

    def close(self) -> None:
        if self.models is not None:  # every exit path: finished, failed, Ctrl-C
            self.models.stop(then=self.inflight.drain)
        self.tasks.executor.close()
        save_snapshot(self.paths.root, self.state, self.signer)  # perf: resume starts here
        self.evaluator.close()
        self.archive.close()
        self.repo.close()
        self.workdirs.close()
        reaper.settle(30.0)
        shutil.rmtree(self.paths.work, ignore_errors=True)
        self.lock.release()

    # -- the one writer -------------------------------------------------------------

    def emit(self, event: E.EventData) -> Event | None:
        """Append one event and fold it: only the models of ``events.py`` are written.

        On a worker thread the event goes to the writer's inbox instead (None returned):
        exactly one thread appends and folds, whatever the candidates in flight.
        """
        if not self.inflight.on_writer():

            def append() -> None:
                self._append(event)

            self.inflight.post(append)
            return None
        return self._append(event)

    def _append(self, event: E.EventData) -> Event:
        ev = self.archive.append(event.type, E.payload(event))
        if isinstance(cid := getattr(event, "id", None), str):
            if isinstance(event, E.CandidateRejected | E.CandidateAbandoned):
                self._newest_event_of.pop(cid, None)  # it will never be gated
            else:
                self._newest_event_of[cid] = ev.seq
        if isinstance(event, E.RunFinished | E.RunInterrupted):
            self.archive.sync()  # a session's end is durable before anyone is told
        return ev

    def _fold(self, notice: Notice) -> None:
        with self.view.lock:  # operators' reads copy under it; never held during their work
            self.state.apply(notice.event)

    # -- the loop ---------------------------------------------------------------------

    def needs_work(self) -> bool:
        """False for a finished or exhausted run with nothing to retry."""
        return self.sched.needs_work(self.retry_failed)

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
                self._record_check()
            try:
                while (outcome := self._step()) is None or outcome == WAIT:
                    self.inflight.pause(outcome == WAIT)  # results of work in flight land here
                return outcome
            except KeyboardInterrupt:
                self.sched.stop(grace_seconds())
                self.emit(E.RunInterrupted(reason="interrupted by the user"))
                raise
        except Exception as exc:  # the run stays resumable; the caller reports the error
            self.sched.stop(0.0)
            if (refused := budget_refusal(exc)) is not None:  # the gateway's 429 (select ...)
                return self._finish("budget_exhausted", refused)
            self.emit(E.RunFinished(state="failed", reason=failure_reason(exc)))
            raise

    def _step(self) -> str | None:
        """One step of the loop: close what an earlier process left open, record the seed,
        move one candidate on, or grow the run; None when a step was taken, WAIT when
        only work in flight can move the run on, else the run's end state."""
        if self._tidy():
            return None
        if (outage := self.state.model_outage) is not None:  # a broken endpoint, not a score
            raise RunFailure(outage_reason(outage))
        seed = self.state.seed
        if seed is None or seed.commit is None:  # (a crash between the seed's two events)
            self._record_seed(seed)
            return None
        if (dead := health.dead_seed(seed)) is not None:  # a broken setup, not a low score
            if self.inflight.jobs:  # the seed's other splits (side by side) settle first
                return WAIT
            return self._seed_unevaluated(dead)
        step = self._pending_step()
        if step is not None:
            return step()
        if seed.state != "admitted":
            if self.inflight.jobs or seed.state in ("mutated", "evaluating", "certified"):
                return WAIT
            return self._seed_unevaluated(seed_failure(seed))
        return self._grow()

    def _seed_unevaluated(self, why: str) -> str:
        """The run ends without an admitted seed: ``failed`` (``why``), unless the budget
        refused the seed's model calls: then it is spent, and the run ends that way."""
        spent = self.budget.exhausted(self.state)
        if spent is None:
            return self._finish("failed", why)
        return self._finish("budget_exhausted", f"the seed could not be evaluated: {spent}")

    def _record_seed(self, seed: Candidate | None) -> None:
        """The seed's two events (its commit was made with the run folder)."""
        st = self.state
        if seed is None:
            self.emit(E.CandidateProposed(id="c0000", parent=None, generation=0, reason="seed"))
        seed_commit = {"commit": st.seed_commit, "tree": st.seed_tree, "description": "seed"}
        self.emit(E.CandidateMutated(id="c0000", **seed_commit))

    def _pending_step(self) -> Callable[[], str | None] | None:
        """The first step that moves an unfinished candidate on (none while all wait)."""
        busy = self.inflight.jobs
        for c in self.state.pending():  # the active index, not every candidate (perf, #11)
            step = self._step_for(c) if c.id not in busy else self._beside_step(c)
            if step is not None:
                return step
        return None

    def _beside_step(self, c: Candidate) -> Callable[[], str | None] | None:
        """The seed's next split beside those in flight: its train, gate and sealed
        evaluations do not depend on each other (a child's stages do), so free slots run
        them side by side (issue 29: 0.5 s less before the first child at K >= 3)."""
        if not (c.is_seed and c.state == "evaluating" and self.inflight.free()):
            return None
        split = c.unstarted_split()
        return None if split is None else (lambda: self._evaluate(c, split, beside=True))

    def _step_for(self, c: Candidate) -> Callable[[], str | None] | None:
        """What moves ``c`` on now: evaluate, retry, gate or record it (None: nothing)."""
        if c.state in ("mutated", "evaluating"):
            return self._evaluation_step(c)
        if c.state == "failed":
            return self._retry_step(c)
        if c.state == "certified" and self.sched.may_review(c):
            return lambda: self._timed(c, self._gated)
        if c.state in ("admitted", "declined") and not c.recorded and self.sched.may_review(c):
            return lambda: self._timed(c, self._recorded)
        return None

    def _evaluation_step(self, c: Candidate) -> Callable[[], str | None] | None:
        if (stop := self.stages.stopped(c)) is not None:  # staged evaluation (#15)
            return lambda: self._record(stop)
        if not self.inflight.free():
            return None
        split = c.next_split()
        assert split is not None
        return lambda: self._evaluate(c, split)

    def _retry_step(self, c: Candidate) -> Callable[[], str | None] | None:
        """A failed candidate's next split, once per session, with ``--retry-failed``."""
        if not (self.retry_failed and self.inflight.free()):
            return None
        split = c.next_split()
        if split is None or (c.id, split) in self._retried:
            return None
        self._retried.add((c.id, split))
        return lambda: self._evaluate(c, split)

    def _record(self, event: E.EventData) -> None:
        self.emit(event)

    def _grow(self) -> str | None:
        """Reflect, start a generation or propose a child: whichever is due."""
        d = self.sched.next()
        if d.kind == "reflect":
            self.emit(reflect(self.calls, self.state, d.generation, self.archive.put))
        elif d.kind == "generation":
            self.emit(E.GenerationStarted(generation=d.generation))
        elif d.kind == "propose":
            try:
                self._propose_child(d.generation)
            except RunConverged as exc:  # select's method rule: no more children; what is
                self.sched.converge(str(exc))  # in flight is evaluated and gated first
        elif d.kind == "finish":
            return self._finish(d.state, d.reason)
        else:
            return WAIT
        return None

    def _tidy(self) -> bool:  # closes what an earlier process left open
        stale = self.sched.stale()
        if stale is not None:
            self.emit(stale)
        return stale is not None

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

    def _propose_child(self, generation: int) -> None:
        """Select on the writer, then mutate on a worker; the outcome comes back here."""
        cid = candidate_id(len(self.state.candidates))
        self.sched.generation_of[cid] = generation
        t0 = time.perf_counter()
        self.emit(self.transaction.select(self.state, cid, generation))
        parent = self.state.candidates[self.state.candidates[cid].parent or ""]
        workdir = self.paths.work / f"mutate-{cid}"

        def work() -> Closure:
            try:
                self.workdirs.take(workdir)  # an earlier one, rewritten in place (perf)
                with self.repo.holding(parent.id):
                    outcome = self.transaction.run(cid, parent, generation, workdir)
            finally:
                self.workdirs.set_aside(workdir)
                self.timings.add(self.timings.total, cid, time.perf_counter() - t0)
            return lambda: self._take_back(outcome)

        self.inflight.start(cid, "mutate", work)

    def _take_back(self, outcome: E.EventData | FinishedEvaluation | list[E.EventData]) -> None:
        """Record what a worker returns (after Ctrl-C only successes: ``Scheduler.keeps``)."""
        if not self.sched.keeps(outcome):
            return
        if isinstance(outcome, FinishedEvaluation):  # the key holder signs, here
            outcome = certify(outcome, self._binding(), self.signer)
        for ev in outcome if isinstance(outcome, list) else [outcome]:
            self.emit(ev)

    # -- evaluation: decided and certified here, run by evaluation.evaluate ----------

    def _evaluate(
        self,
        c: Candidate,
        split: str,
        reserved: bool = False,
        wait: bool = False,
        beside: bool = False,
    ) -> str | None:
        """Start one attempt on a worker (``wait``: on this thread, e.g. the sealed one;
        ``beside``: while another of ``c``'s attempts runs)."""
        ids = self.stages.task_ids(split)  # a stage's tasks (#15), charged as it starts
        refusal = self.budget.refuse_evaluation(self.state, reserved or split == "sealed", len(ids))
        if refusal is not None:
            if reserved or self.inflight.jobs:  # the run ends once what is in flight settles
                return None if reserved else WAIT
            return self._finish("budget_exhausted", refusal)
        self.task_lock.check((base_split(split),))  # a stage runs on its split's tasks (#15)
        assert c.commit is not None and c.tree is not None
        attempt = len(c.attempts.get(split, [])) + 1
        self.emit(E.EvaluationStarted(id=c.id, split=split, attempt=attempt, tasks=len(ids)))
        job = Job(c.id, c.commit, c.tree, c.parent_commit, split, attempt, ids, c.description)
        t0 = time.perf_counter()

        def work() -> Closure:
            try:
                with self.repo.holding(c.id):
                    result = evaluate(job, self.tasks)  # the unit a worker runs
            finally:
                self.timings.add(self.timings.total, c.id, time.perf_counter() - t0)
            return lambda: self._take_back(result)

        # on disk before it runs: a sealed attempt, and any attempt whose evaluation_started
        # is a task-run charge (max_task_runs: lost with the machine, its tasks would have
        # run uncharged; a minibatch's tasks_run is synced the same way, TaskRunMeter)
        if wait or base_split(split) == "sealed" or self.budget.budget.max_task_runs is not None:
            self.inflight.synced()
        if wait:  # the sealed evaluation runs here, on the writer
            work()()
        else:
            self.inflight.start(c.id, f"evaluate {split}", work, beside=beside)
        return None

    def _binding(self) -> Binding:
        st = self.state
        return Binding(
            run_id=st.run_id,
            recipe_digest=st.recipe_digest,
            evaluator_fingerprint=st.evaluator_fingerprint,
            taskset_fingerprint=self.task_lock.fingerprint,
            isolation=self.evaluator.isolation,
            code=certified_code(self.paths.recipe_lock),
            evaluator=self.evaluator.record_part(),
        )

    def _gated(self, c: Candidate) -> None:
        # the sync point a score depends on: its certificates durable before the gate reads
        # it; one fsync covers every candidate appended before it (candidates in flight)
        self.archive.sync_through(self._newest_event_of.pop(c.id, -1))
        decision = gate(self.calls, self.state, c)
        self.emit(decision)
        if not decision.admit:  # admitted candidates stay exported: they may be parents
            self.repo.drop_export(c.id)

    def _recorded(self, c: Candidate) -> None:
        self.emit(record(self.calls, self.state, c))
        self._newest_event_of.pop(c.id, None)


def _no_outage(cid: str, slot: str) -> str | None:
    return None


def outage_reason(outage: dict[str, Any]) -> str:
    """One line: the model, its endpoint and the error, and that the run resumes."""
    error = " ".join(str(outage.get("error", "")).split())
    return (
        f"model {outage.get('model')!r} failed {outage.get('calls')} calls in a row for "
        f"infrastructure reasons: {error} (resume once it answers)"
    )


__all__ = ["SPLITS", "Engine", "OperatorFailed", "Progress", "RunFailure"]
