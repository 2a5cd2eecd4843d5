"""Budgets: checked before every costly action, failing closed."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from rsiframe.archive.state import CHILD_SPLITS, RunState
from rsiframe.recipe.schema import Budget

#: evaluations a child needs (train and gate) and one kept for the champion's sealed anchor
EVALS_PER_CHILD = 2
RESERVED_EVALS = 1


@dataclass(frozen=True)
class TaskCosts:
    """Task runs a child may need (``max_task_runs``): per evaluation split or stage, its
    splits in order, what its rollout and validate may run, and the sealed anchor's."""

    per_split: dict[str, int] = field(default_factory=dict)
    child_splits: tuple[str, ...] = ()
    uncertified: int = 0
    sealed: int = 0

    @property
    def per_child(self) -> int:
        return self.uncertified + sum(self.per_split.get(s, 0) for s in self.child_splits)


class BudgetGuard:
    def __init__(
        self,
        budget: Budget,
        evals_per_child: int = EVALS_PER_CHILD,
        costs: TaskCosts | None = None,
    ) -> None:
        self.budget = budget
        self.evals_per_child = evals_per_child  # more with staged evaluation
        self.costs = costs or TaskCosts()

    def used(self, st: RunState, now: float | None = None) -> dict[str, Any]:
        return {
            "generations": st.generation,
            "candidates": st.children(),
            "evaluations": st.evaluations,
            "task_runs": st.task_runs,
            "wall_seconds": round(st.wall_seconds(now), 3),
            "model_tokens": st.tokens,
            "cost": round(st.cost, 6),
        }

    def limits(self) -> dict[str, Any]:
        b = self.budget
        return {
            "generations": b.max_generations,
            "candidates": b.max_candidates,
            "evaluations": b.max_evaluations,
            "task_runs": b.max_task_runs,
            "wall_seconds": b.max_wall_seconds,
            "model_tokens": b.max_model_tokens,
            "cost": b.max_cost,
        }

    def report(self, st: RunState, now: float | None = None) -> dict[str, Any]:
        return {"used": self.used(st, now), "limits": self.limits()}

    def anchor_hold(self, st: RunState) -> int:
        """Model tokens held for the champion's sealed evaluation (the anchor): its tasks at
        the most tokens per task any evaluation took so far (a gateway call's reservation,
        which is what the gateway admits it on, when that is more than it spent). Only the
        anchor (and the seed's sealed evaluation) may spend them; 0 while no evaluation has
        called a model. An estimate: a champion whose agent asks for more than any earlier
        evaluation did may still be refused part of it, and its evaluation fails then."""
        if self.budget.max_model_tokens is None:
            return 0
        return math.ceil(st.eval_tokens_per_task * self.costs.sealed)

    def _held(self, st: RunState, reserved: bool) -> int:
        """The tokens out of reach: the anchor's hold, for all but the anchor itself."""
        return 0 if reserved else self.anchor_hold(st)

    def tokens_left(self, st: RunState, reserved: bool = False) -> int | None:
        """Model tokens the next evaluation may use (None: unlimited), less the anchor's hold
        unless it is the anchor (``reserved``); the server reserves each request's worst
        case before it runs, so a run never overdraws."""
        b = self.budget
        if b.max_model_tokens is None:
            return None
        return max(0, b.max_model_tokens - self._held(st, reserved) - st.tokens)

    def exhausted(self, st: RunState) -> str | None:
        """Why the run's wall time, model tokens or cost are spent (None: they are not)."""
        return self._common(st)

    def _common(self, st: RunState, reserved: bool = False) -> str | None:
        b = self.budget
        if b.max_wall_seconds is not None and st.wall_seconds(time.time()) >= b.max_wall_seconds:
            return f"wall time reached {b.max_wall_seconds:g}s"
        tokens = self._tokens_spent(st, reserved)
        if tokens is not None:
            return tokens
        if b.max_cost is not None and st.cost >= b.max_cost:
            return f"cost reached {b.max_cost:g}"
        if st.model_refused is not None and not (
            reserved and st.model_refused_code == "max_model_tokens"
        ):  # the gateway's own count: fail closed
            return f"the model gateway refused a call: {st.model_refused}"
        return None

    def _tokens_spent(self, st: RunState, reserved: bool) -> str | None:
        """Why model tokens are spent for all but the anchor, or for it too (``reserved``):
        a refusal before the limit was a request the tokens outside the hold could not
        cover, so the anchor may still spend what is held."""
        b = self.budget
        if b.max_model_tokens is None:
            return None
        held = self._held(st, reserved)
        if st.tokens >= b.max_model_tokens - held:
            why = f" ({held} held for the champion's sealed evaluation)" if held else ""
            return f"model tokens reached {b.max_model_tokens}{why}"
        if st.tokens_refused and not reserved:
            # the server reserves each request's worst case: a refusal means what is left
            # cannot pay for a request, so the allowance is spent as far as the run goes
            return (
                f"model tokens reached {b.max_model_tokens} ({st.tokens} spent; the rest "
                f"could not cover a request)"
            )
        return None

    def plan_done(self, st: RunState) -> str | None:
        """Why the run has made the children its recipe planned (``max_candidates``; None:
        not yet). A run stopped by its own plan (this, or ``max_generations``) ends
        ``finished``; one stopped by a resource (evaluations, task runs, wall time, model
        tokens, cost) ends ``budget_exhausted``."""
        b = self.budget
        if b.max_candidates is not None and st.children() >= b.max_candidates:
            return f"candidates reached {b.max_candidates}"
        return None

    def refuse_generation(self, st: RunState) -> str | None:
        """Why generation ``st.generation + 1`` may not start (None: it may)."""
        b = self.budget
        if b.max_generations is not None and st.generation >= b.max_generations:
            return f"generations reached {b.max_generations}"
        return self._task_runs_spent(st) or self._common(st)

    def _task_runs_spent(self, st: RunState) -> str | None:
        b = self.budget
        if b.max_task_runs is None:
            return None
        if st.task_runs_refused is not None:
            return st.task_runs_refused
        if st.task_runs >= b.max_task_runs:
            return f"task runs reached {b.max_task_runs}"
        return None

    def refuse_candidate(self, st: RunState) -> str | None:
        """Why no new child may be proposed; keeps room for its evaluations and for those
        the candidates in flight have yet to start, and for the model tokens and cost the
        children in flight may still spend (each as much as the costliest child so far)."""
        b = self.budget
        tokens, cost = in_flight_usage(st)
        if b.max_model_tokens is not None:
            # their evaluations' model calls, and the anchor's hold, at the run's own rate
            runs = self.costs.per_child + pending_task_runs(st, self.costs)
            tokens += math.ceil(st.eval_tokens_per_task * runs) + self.anchor_hold(st)
            if st.tokens + tokens > b.max_model_tokens:
                return (
                    f"model tokens would exceed {b.max_model_tokens} with the children in "
                    f"flight, their evaluations and the champion's sealed evaluation"
                )
        if b.max_cost is not None and st.cost + cost > b.max_cost:
            return f"cost would exceed {b.max_cost:g} with the children in flight"
        if b.max_candidates is not None and st.children() >= b.max_candidates:
            return f"candidates reached {b.max_candidates}"
        need = self.evals_per_child + RESERVED_EVALS + pending_evaluations(st)
        if b.max_evaluations is not None and st.evaluations + need > b.max_evaluations:
            return f"evaluations would exceed {b.max_evaluations}"
        if b.max_task_runs is not None:
            runs = self.costs.per_child + self.costs.sealed + pending_task_runs(st, self.costs)
            if st.task_runs + runs > b.max_task_runs:
                return f"task runs would exceed {b.max_task_runs}"
        return self._task_runs_spent(st) or self._common(st)

    def refuse_evaluation(
        self, st: RunState, reserved: bool = False, tasks: int | None = None
    ) -> str | None:
        """Why one more evaluation of ``tasks`` tasks (None: the sealed anchor's) may not
        run; ``reserved`` may use the evaluation and the task runs kept for that anchor."""
        b, tasks = self.budget, self.costs.sealed if tasks is None else tasks
        if b.max_evaluations is not None:
            limit = b.max_evaluations if reserved else b.max_evaluations - RESERVED_EVALS
            if st.evaluations >= limit:
                return f"evaluations reached {b.max_evaluations}"
        if b.max_task_runs is not None:
            room = b.max_task_runs - (0 if reserved else self.costs.sealed)
            if st.task_runs + tasks > room:
                return f"task runs would exceed {b.max_task_runs}"
        return self._common(st, reserved)

    def refuse_task_runs(self, st: RunState, tasks: int, unfolded: int = 0) -> str | None:
        """Why ``tasks`` uncertified task runs (a minibatch, a rollout) may not start, with
        ``unfolded`` charged but not folded yet; the sealed anchor's room is kept."""
        b = self.budget
        if b.max_task_runs is None:
            return None
        used = st.task_runs + unfolded
        if used + tasks > b.max_task_runs - self.costs.sealed:
            return f"task runs would exceed {b.max_task_runs} ({used} used, {tasks} more asked)"
        return None


def pending_evaluations(st: RunState) -> int:
    """Evaluations that children in flight (proposed, mutated, evaluating) have yet to start."""
    n = 0
    for c in st.active.values():  # the active index: a child in flight is always in it
        if c.is_seed or c.state not in ("proposed", "mutated", "evaluating"):
            continue
        for split in c.required_splits:
            last = c.latest(split)
            if c.record(split) is None and (last is None or last.status != "running"):
                n += 1
    return n


def pending_task_runs(st: RunState, costs: TaskCosts) -> int:
    """Task runs that children in flight may still start: their rollout and validate (worst
    case, less what they ran) until they are mutated, then their evaluations not started."""
    n = 0
    for c in st.active.values():
        if c.is_seed or c.state not in ("proposed", "mutated", "evaluating"):
            continue
        if c.state == "proposed":
            n += max(0, costs.uncertified - c.uncertified_runs)
        for split in c.splits or costs.child_splits or CHILD_SPLITS:
            last = c.latest(split)
            if c.record(split) is None and (last is None or last.status != "running"):
                n += costs.per_split.get(split, 0)
    return n


def in_flight_usage(st: RunState) -> tuple[float, float]:
    """Tokens and cost a new child and the children being mutated may still spend: per
    child, the most any child that got past its mutation spent, by the gateway's count (an
    estimate; the gateway's reservations are the hard limit). While one is in flight and
    none got that far: all of it (inf)."""
    # from the active index and the state's running maximum (spent_max), not a scan of
    # every candidate that spent (which made a model run quadratic in its size)
    flying = sum(1 for c in st.active.values() if not c.is_seed and c.state == "proposed")
    top = st.spent_max
    if top is None and st.children() <= flying:  # no child got past its mutation yet
        return (float("inf"), float("inf")) if flying else (0, 0.0)
    n = flying + 1  # the new child too
    tokens, cost = top if top is not None else (0, 0.0)
    return tokens * n, cost * n
