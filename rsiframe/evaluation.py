"""Evaluation (framework-owned): a candidate's verified export run on one split's tasks.

:func:`evaluate` is the part of an evaluation that may run on a worker: it gets a
:class:`Job` (everything it needs, fixed before it starts) and returns a
:class:`~rsiframe.certify.FinishedEvaluation` for the key holder to certify, or the
events of a failed attempt. It reports evidence as it goes (``task_finished``,
``model_built``, ``usage``) through ``emit``, the run's one writer.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe import events as E
from rsiframe import faults
from rsiframe.budget import BudgetGuard
from rsiframe.build import BuildRejected
from rsiframe.certify import FinishedEvaluation
from rsiframe.errors import ClusterLost
from rsiframe.evaluator import EvaluationOutput, LocalEngine, Put, TaskRun
from rsiframe.executor import Executor, LocalExecutor
from rsiframe.opcall import Progress, Timings
from rsiframe.state import RunState
from rsiframe.tasks import TaskSet

Emit = Callable[[E.EventData], Any]


@dataclass(frozen=True)
class Job:
    """One evaluation attempt, decided by the engine before it starts."""

    candidate: str
    commit: str
    tree: str
    parent_commit: str | None
    split: str
    attempt: int
    task_ids: list[str]
    description: str = ""


class TaskRunner:
    """Runs a candidate on tasks: progress, timings, and a D/T/H build's model hooks."""

    def __init__(
        self,
        evaluator: LocalEngine,
        taskset: TaskSet,
        put: Put,
        emit: Emit,
        exports: Callable[[str, str, str], Path],
        budget: BudgetGuard,
        state: RunState,
        timings: Timings,
        executor: Executor | None = None,
    ) -> None:
        self.evaluator = evaluator
        self.executor: Executor = executor or LocalExecutor()  # this process, or a Ray cluster
        self.taskset = taskset
        self.put = put
        self.emit = emit
        self.exports = exports  # (name, commit, tree) -> a verified export
        self.budget = budget
        self.state = state
        self.timings = timings
        self.progress = Progress()
        #: candidates in flight (K): the unreserved model tokens are shared among them
        self.share = 1
        self._tokens = threading.Lock()
        self._reserved: dict[int, int] = {}  # token reservations of runs in flight
        self._unfolded = 0  # tokens reported by workers, not yet folded by the writer

    def reserve_tokens(self, key: int) -> int | None:
        """This run's token limit: an equal share of what no run in flight has reserved,
        so K evaluations in flight never overdraw ``max_model_tokens`` together."""
        with self._tokens:
            left = self.budget.tokens_left(self.state)
            if left is None:
                return None
            free = max(0, left - sum(self._reserved.values()) - self._unfolded)
            share = free // max(1, self.share - len(self._reserved))
            self._reserved[key] = share
            return share

    def release_tokens(self, key: int) -> None:
        with self._tokens:
            self._reserved.pop(key, None)

    def folded(self, tokens: int) -> None:
        """The writer folded ``tokens`` of an evaluation's usage into the state."""
        with self._tokens:
            self._unfolded = max(0, self._unfolded - tokens)

    def model_hooks(self, cid: str, split: str, attempt: int = 0) -> dict[str, Any]:
        """Evaluator hooks of a D/T/H build: record the model built, charge the tokens."""
        if self.evaluator.builder is None:
            return {}  # no build, no model, no tokens

        def on_built(model: dict[str, Any]) -> None:
            if split != "rollout":
                self.emit(E.ModelBuilt(id=cid, split=split, attempt=attempt, model=model))

        def on_usage(usage: dict[str, int]) -> None:
            if usage.get("total_tokens") or usage.get("refused"):
                with self._tokens:  # counted until the writer folds it (see folded)
                    self._unfolded += usage.get("total_tokens") or 0
                where = {"id": cid, "slot": "evaluate", "split": split, "attempt": attempt}
                self.emit(E.UsageSpent(**where, tokens=usage["total_tokens"], **usage))

        return {
            "on_built": on_built,
            "on_usage": on_usage,
            "token_limit": self.reserve_tokens(threading.get_ident()),
        }

    def run(
        self,
        cid: str,
        split: str,
        candidate_dir: Path,
        task_ids: list[str],
        on_task: Callable[[TaskRun], None] | None = None,
        attempt: int = 0,
    ) -> EvaluationOutput:
        done = 0
        self.progress.tasks(cid, split, 0, len(task_ids))

        def on_done(run: TaskRun) -> None:
            nonlocal done
            done += 1
            if on_task is not None:
                on_task(run)
            self.progress.tasks(cid, split, done, len(task_ids))

        hooks = self.model_hooks(cid, split, attempt)
        try:
            # executor hook (issue 11.3): the one place an evaluation of a verified export runs
            out = self.executor.run(
                self.evaluator, self.taskset, candidate_dir, task_ids, self.put, on_done, **hooks
            )
        finally:
            self.release_tokens(threading.get_ident())
        self.timings.add(self.timings.tasks, cid, out.task_seconds)
        return out


def evaluate(job: Job, tasks: TaskRunner) -> FinishedEvaluation | list[E.EventData]:
    """Run one attempt; its results, or the events that end it as failed.

    A build that fails by the candidate's own fault ends the candidate rejected; any
    other exception is an infrastructure failure (evidence kept, retried explicitly).
    """
    faults.reached("stage:evaluate")
    tasks.progress.stage(job.candidate, f"evaluate {job.split}")
    where = {"id": job.candidate, "split": job.split, "attempt": job.attempt}
    started = time.time()

    def evidence(run: TaskRun) -> None:
        # as each task ends, so an interrupted attempt keeps what it produced
        tasks.emit(
            E.TaskFinished(
                **where,
                task=run.task_id,
                reward=run.reward,
                error=run.error,
                trajectory=run.trajectory_digest,
            )
        )

    try:
        export = tasks.exports(job.candidate, job.commit, job.tree)
        out = tasks.run(job.candidate, job.split, export, job.task_ids, evidence, job.attempt)
    except ClusterLost:  # not this candidate's failure: the run ends failed (resumable)
        raise
    except BuildRejected as exc:  # the candidate's own build failed: it ends rejected
        return [
            E.EvaluationFailed(**where, error=str(exc), build=exc.details),
            E.CandidateRejected(
                id=job.candidate,
                stage=exc.stage,
                reasons=[exc.reason],
                commit=job.commit,
                description=job.description,
                details=exc.details,
            ),
        ]
    except Exception as exc:  # infrastructure failure: evidence kept, explicit retry
        trace = tasks.put("".join(traceback.format_exception(exc)).encode())
        error = f"{type(exc).__name__}: {exc}"
        return [E.EvaluationFailed(**where, error=error, traceback=trace)]
    ids = job.task_ids
    return FinishedEvaluation(
        candidate=job.candidate,
        commit=job.commit,
        tree=job.tree,
        parent_commit=job.parent_commit,
        split=job.split,
        attempt=job.attempt,
        rewards={t: out.runs[t].reward for t in ids},
        errors={t: r.error for t, r in out.runs.items() if r.error},
        trajectories={t: out.runs[t].trajectory_digest for t in ids},
        model=out.model,
        executor=out.executor,
        started_at=started,
        finished_at=time.time(),
    )
