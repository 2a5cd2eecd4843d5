"""What runs next with candidates in flight: the policy half of the engine's loop.

The engine acts (it emits, starts work, certifies); :class:`Scheduler` only decides,
from the folded state and the jobs in flight:

- **generational** (deterministic): a generation's children are proposed from the state
  as the generation began (their transaction's operator calls get that horizon), run up
  to K at a time, and are gated and recorded in candidate order once all of them are
  certified, rejected or failed; the next generation starts after that.
- **steady** (not deterministic): a new child is proposed whenever a slot frees; select
  sees the candidates in flight; each child is gated as soon as it is certified.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rsiframe.api import SLOT_TABLE
from rsiframe.archive import events as E
from rsiframe.archive.state import Candidate, RunState
from rsiframe.engine.budget import BudgetGuard
from rsiframe.engine.certify import FinishedEvaluation
from rsiframe.engine.inflight import Inflight
from rsiframe.recipe.schema import Recipe

#: nothing can start until work in flight comes back
WAIT = "wait"
_OPEN = ("proposed", "mutated", "evaluating")


def candidate_id(n: int) -> str:
    return f"c{n:04d}"


def grace_seconds() -> float:
    """How long Ctrl-C waits for work in flight before killing its sandboxes."""
    try:
        return max(0.0, float(os.environ.get("RSIFRAME_GRACE_S", "10")))
    except ValueError:
        return 10.0


@dataclass(frozen=True)
class Decision:
    """What the engine does next: reflect, start a generation, propose, finish or wait."""

    kind: str  # reflect | generation | propose | finish | wait
    generation: int = 0
    state: str = ""
    reason: str = ""


@dataclass
class Scheduler:
    recipe: Recipe
    state: RunState
    budget: BudgetGuard
    inflight: Inflight
    reflects: bool  # the recipe fills the reflect slot
    stopping: bool = False
    generation_of: dict[str, int] = field(default_factory=dict)  # children this process proposed
    closed: set[int] = field(default_factory=set)  # generations the budget closed early
    converged: str | None = None  # select ended the search (SearchConverged): why

    @property
    def generational(self) -> bool:
        return self.recipe.concurrency.mode == "generational"

    def converge(self, reason: str) -> None:
        """Select ended the search (SearchConverged): propose nothing more; the run ends
        ``finished`` with ``reason`` once what is in flight is evaluated and gated."""
        self.converged = reason

    def stop(self, grace: float) -> None:
        """Start nothing new; wait up to ``grace`` seconds for work in flight, then kill it."""
        self.stopping = True
        self.inflight.wind_down(grace)

    def needs_work(self, retry_failed: bool) -> bool:
        """False for a finished or exhausted run with nothing to retry."""
        terminal = self.state.terminal
        if terminal is None or terminal["state"] in ("interrupted", "failed"):
            return True
        if retry_failed:
            return any(c.state == "failed" for c in self.state.candidates.values())
        return False

    def keeps(self, outcome: object) -> bool:
        """Whether to record what a worker returned: after Ctrl-C only successes (a failure
        then is the interrupt's doing: the attempt re-runs, the mutation is abandoned)."""
        return not self.stopping or isinstance(outcome, E.CandidateMutated | FinishedEvaluation)

    def horizon(self, cid: str, slot: str) -> int | None:
        """Generational mode: a child's transaction sees the state as its generation began."""
        if not self.generational or not SLOT_TABLE[slot].in_transaction:
            return None
        return self.generation_of.get(cid)

    def _full(self, g: int) -> bool:
        return g == 0 or self.state.proposed_in.get(g, 0) >= self.recipe.children_per_generation

    def stale(self) -> E.EventData | None:
        """What an earlier process left open and must be closed first: a proposal whose
        mutation did not finish (abandoned), an attempt with no outcome (interrupted)."""
        for c in self.state.pending():
            if c.id in self.inflight.jobs:
                continue
            if c.state == "proposed" and not c.is_seed:
                return E.CandidateAbandoned(id=c.id, reason="the mutation did not finish")
            a = c.open_attempt()
            if a is not None:
                return E.EvaluationInterrupted(id=c.id, split=a.split, attempt=a.attempt)
        return None

    def _open(self) -> list[Candidate]:
        """Candidates that may be unsettled: the active index and the jobs in flight (a
        scan of every candidate per step made a run quadratic in its size)."""
        st = self.state
        out = list(st.active.values())
        out += [c for cid in self.inflight.jobs if (c := st.candidates.get(cid)) is not None]
        return out

    def unsettled(self, generation: int | None) -> bool:
        """Whether a child of ``generation`` (None: any) is still in flight or unreviewed."""
        for c in self._open():
            if c.is_seed or (generation is not None and c.generation != generation):
                continue
            s = c.state
            if c.id in self.inflight.jobs or s in _OPEN or s == "certified":
                return True
            if s in ("admitted", "declined") and not c.recorded:
                return True
        return False

    def may_review(self, c: Candidate) -> bool:
        """Generational mode gates a generation's children in candidate order, once all
        of them are certified (or rejected or failed); steady mode as each one is."""
        if not self.generational or c.is_seed:
            return True
        g = c.generation
        if not self._full(g) and g not in self.closed and g == self.state.generation:
            return False
        for o in self._open():
            busy = o.id in self.inflight.jobs or o.state in _OPEN
            if o.generation == g and not o.is_seed and busy:
                return False
        return True

    def next(self) -> Decision:
        """Reflect, start a generation or propose a child: whichever is due (or wait)."""
        if self.converged is not None:  # select ended the search (SearchConverged)
            return Decision(WAIT) if self._busy() else self._converged(self.converged)
        g = self.state.generation
        full, closed = self._full(g), g in self.closed
        if (full or closed) and self.generational and self.unsettled(g):
            return Decision(WAIT)
        if closed and not self._busy():
            refusal = self.budget.refuse_candidate(self.state)
            if refusal is not None:
                return self._end(refusal)
            self.closed.discard(g)  # rejected children gave their evaluations back
            closed = False
        reflect = self._reflection_due(g, full)
        if reflect is not None:
            return reflect
        if full:
            return self._next_generation(g)
        if closed or self.stopping or not self.inflight.free():
            return Decision(WAIT)
        return self._propose(g)

    @staticmethod
    def _converged(reason: str) -> Decision:
        return Decision("finish", state="finished", reason=reason)

    def _busy(self) -> bool:
        """Whether anything is in flight or not yet settled."""
        return bool(self.inflight.jobs) or self.unsettled(None)

    def _reflection_due(self, g: int, full: bool) -> Decision | None:
        """The oldest generation not yet reflected on, once it has settled (the current
        one only when it is full)."""
        if not self.reflects:
            return None
        for h in sorted(set(range(1, g + 1)) - set(self.state.reflected)):
            if self.unsettled(h) or (h == g and not full):
                return None
            return Decision("reflect", generation=h)
        return None

    def _next_generation(self, g: int) -> Decision:
        """Generation ``g`` is full: begin the next, or wait for what is in flight, or end."""
        refusal = self.budget.refuse_generation(self.state)
        if refusal is None:
            return Decision("generation", generation=g + 1)
        if self._busy():
            return Decision(WAIT)  # steady: what is in flight ends first
        limit = self.recipe.budget.max_generations
        if limit is not None and g >= limit:
            return Decision("finish", state="finished", reason=f"completed {g} generation(s)")
        return self._end(refusal)

    def _propose(self, g: int) -> Decision:
        """A child of generation ``g`` if the budget allows one; else close the generation
        until what is in flight settles, or end."""
        refusal = self.budget.refuse_candidate(self.state)
        if refusal is None:
            return Decision("propose", generation=g)
        if self._busy():
            self.closed.add(g)  # no more children until what is in flight settles
            return Decision(WAIT)
        return self._end(refusal)

    def _end(self, refusal: str) -> Decision:
        """The run ends: ``finished`` when it made the children its budget planned,
        ``budget_exhausted`` when a resource ran out first (``refusal`` says which)."""
        done = self.budget.plan_done(self.state)
        if done is not None:
            return Decision("finish", state="finished", reason=done)
        return Decision("finish", state="budget_exhausted", reason=refusal)


def seed_failure(seed: Candidate) -> str:
    """Why a run whose seed was not admitted fails, with the first evaluation error."""
    reason = "the seed could not be evaluated"
    errors = [a.error for s in seed.required_splits if (a := seed.latest(s)) and a.error]
    if errors:
        reason += f": {errors[0].splitlines()[0]}"
    return reason + " (fix it, then resume --retry-failed)"
