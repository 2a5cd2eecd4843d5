"""Evaluation (framework-owned): a candidate's verified export run on one split's tasks.

:func:`evaluate` is the part of an evaluation that may run on a worker: it gets a
:class:`Job` (everything it needs, fixed before it starts) and returns a
:class:`~rsiframe.engine.certify.FinishedEvaluation` for the key holder to certify, or the
events of a failed attempt. It reports evidence as it goes (``task_finished``,
``model_built``, ``usage``) through ``emit``, the run's one writer.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe.archive import events as E
from rsiframe.archive.state import CHILD_SPLITS, Candidate, RunState
from rsiframe.dth.build import BuildRejected
from rsiframe.engine.budget import BudgetGuard
from rsiframe.engine.certify import FinishedEvaluation
from rsiframe.engine.hooks import Notice
from rsiframe.errors import ClusterLost
from rsiframe.evaluators.base import EvaluationOutput, Evaluator, Put, TaskRun
from rsiframe.executors.base import Executor
from rsiframe.executors.local import LocalExecutor
from rsiframe.recipe.schema import Recipe, StageSpec
from rsiframe.slots.calls import Progress, Timings
from rsiframe.tasks.taskset import TaskSet
from rsiframe.util import faults

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


@dataclass(frozen=True)
class Stage:
    """One stage of a staged evaluation: a split or a fixed subset of it (``train@1``)."""

    name: str
    split: str
    task_ids: tuple[str, ...]
    min_score: float | None
    on_fail: str = "reject"  # or "archive": admitted with this stage's score (DGM)


class BudgetRefused(RuntimeError):
    """An evaluation's agent was refused a model call for the run's budget: the attempt
    fails, its evidence kept, instead of being certified with the budget's score."""


def base_split(name: str) -> str:
    """The task-lock split a stage's evaluation runs on (``train@1`` -> ``train``)."""
    return name.split("@", 1)[0]


class Stages:
    """A child's evaluation cascade (``evaluator.stages``), the same for every child.

    A stage with ``tasks: N`` runs a fixed subset of its split (the first N of the split's
    task ids shuffled by the recipe's ``random_seed`` and the stage number, so every child
    is screened on the same tasks) and is recorded as the split ``<split>@<stage>``; a
    stage without ``tasks`` is the split itself. Splits the cascade does not name
    (train, gate) follow it. A certified stage scoring below its ``min_score`` stops the
    child there: it never pays for the later stages (DGM's ``DGM_outer.py``, OpenEvolve's
    cascade evaluation). With ``on_fail: archive`` the stopped child is not rejected but
    admitted with that stage's score, as DGM keeps every compiled child in its archive
    with the score of what it was evaluated on (a low weight, still a stepping stone).
    """

    def __init__(
        self, specs: list[StageSpec], split: dict[str, list[str]], random_seed: int = 0
    ) -> None:
        self.split = split
        stages: list[Stage] = []
        for i, spec in enumerate(specs, 1):
            ids = sorted(split.get(spec.split, []))
            name: str = spec.split
            if spec.tasks is not None and spec.tasks < len(ids):
                random.Random(f"{random_seed}:stage{i}").shuffle(ids)
                ids, name = sorted(ids[: spec.tasks]), f"{spec.split}@{i}"
            if all(s.name != name for s in stages):
                stages.append(Stage(name, spec.split, tuple(ids), spec.min_score, spec.on_fail))
        if stages:
            for rest in CHILD_SPLITS:
                if all(s.name != rest for s in stages):
                    stages.append(Stage(rest, rest, tuple(split.get(rest, [])), None))
        self.stages = {s.name: s for s in stages}

    @classmethod
    def of(cls, recipe: Recipe, split: dict[str, list[str]]) -> Stages:
        return cls(recipe.evaluator.stages, split, recipe.random_seed)

    @property
    def evals_per_child(self) -> int:
        """Evaluations a child may need (the budget keeps room for them before proposing)."""
        return max(2, len(self.stages))

    @property
    def splits(self) -> list[str]:
        """A child's evaluation splits in order (empty: the default train, gate)."""
        return list(self.stages)

    def task_ids(self, name: str) -> list[str]:
        stage = self.stages.get(name)
        return list(stage.task_ids) if stage is not None else list(self.split[name])

    def stopped(self, c: Candidate) -> E.CandidateRejected | E.CandidateGated | None:
        """The event that stops ``c`` at a stage it failed (None: it goes on): rejected
        there, or archived with the stage's score (``on_fail: archive``)."""
        names = c.required_splits
        for k, name in enumerate(names, 1):
            rec, stage = c.record(name), self.stages.get(name)
            if rec is None:
                return None
            score = rec.predicate.score
            if stage is None or stage.min_score is None or score >= stage.min_score:
                continue
            why = (
                f"stopped at stage {k}/{len(names)} ({name}, {len(stage.task_ids)} tasks): "
                f"score {score:.3f} < min_score {stage.min_score:g}"
            )
            details = {
                "stopped_at": name,
                "stage": k,
                "stages": len(names),
                "score": score,
                "min_score": stage.min_score,
                "tasks": len(stage.task_ids),
            }
            if stage.on_fail == "archive":
                reason = f"archived with its stage score: {why}"
                return E.CandidateGated(id=c.id, admit=True, reason=reason, stopped=details)
            return E.CandidateRejected(
                id=c.id,
                stage="evaluate",
                reasons=[why],
                commit=c.commit,
                description=c.description,
                details=details,
            )
        return None


class TaskRunner:
    """Runs a candidate on tasks: progress, timings, and a D/T/H build's model hooks."""

    def __init__(
        self,
        evaluator: Evaluator,
        taskset: TaskSet,
        put: Put,
        emit: Emit,
        exports: Callable[[str, str, str], Path],
        budget: BudgetGuard,
        state: RunState,
        timings: Timings,
        executor: Executor | None = None,
        gateway: Any | None = None,
        *,
        share: int = 1,
        progress: Progress | None = None,
    ) -> None:
        """``share``: candidates in flight (K), among which the unreserved model tokens are
        shared; ``gateway``: the run's model gateway (a candidate's agent reaches
        ``evaluator.config.model`` only through it)."""
        self.evaluator = evaluator
        #: the run's model gateway (``gateway.Gateway``, or None without ``models:``): a
        #: candidate's agent reaches ``evaluator.config.model`` only through it
        self.gateway = gateway
        self.executor: Executor = executor or LocalExecutor()  # this process, or a Ray cluster
        self.taskset = taskset
        self.put = put
        self.emit = emit
        self.exports = exports  # (name, commit, tree) -> a verified export
        self.budget = budget
        self.state = state
        self.timings = timings
        self.progress = progress or Progress()
        self.share = share
        self._tokens = threading.Lock()
        self._reserved: dict[int, int] = {}  # token reservations of runs in flight
        self._unfolded = 0  # tokens reported by workers, not yet folded by the writer

    def reserve_tokens(self, key: int, anchor: bool = False) -> int | None:
        """This run's token limit: an equal share of what no run in flight has reserved,
        so K evaluations in flight never overdraw ``max_model_tokens`` together; only a
        sealed evaluation (``anchor``) may share in the tokens held for the anchor."""
        with self._tokens:
            left = self.budget.tokens_left(self.state, reserved=anchor)
            if left is None:
                return None
            free = max(0, left - sum(self._reserved.values()) - self._unfolded)
            share = free // max(1, self.share - len(self._reserved))
            self._reserved[key] = share
            return share

    def release_tokens(self, key: int) -> None:
        with self._tokens:
            self._reserved.pop(key, None)

    def on_tokens_spent(self, notice: Notice) -> None:
        """A hook (``MODEL_TOKENS_SPENT``): the writer folded an evaluation's usage."""
        assert isinstance(notice.data, E.UsageSpent)
        with self._tokens:
            self._unfolded = max(0, self._unfolded - notice.data.tokens)

    def model_hooks(
        self,
        cid: str,
        split: str,
        attempt: int = 0,
        opened: list[Any] | None = None,
        refused: list[int] | None = None,
    ) -> dict[str, Any]:
        """Evaluator hooks: the gateway endpoint of ``evaluator.config.model`` (each one
        opened is added to ``opened``); of a D/T/H build, record the model built and
        charge the tokens (requests its server refused for the budget: into ``refused``)."""
        hooks = self.gateway_hooks(cid, split, opened)
        if self.evaluator.builder is None:
            return hooks  # no build, no model, no tokens

        def on_built(model: dict[str, Any]) -> None:
            if split not in ("rollout", "minibatch"):  # uncertified runs
                self.emit(E.ModelBuilt(id=cid, split=split, attempt=attempt, model=model))

        def on_usage(usage: dict[str, int]) -> None:
            if usage.get("refused") and refused is not None:
                refused.append(usage["refused"])
            if usage.get("total_tokens") or usage.get("refused"):
                with self._tokens:  # counted until the writer folds it (see folded)
                    self._unfolded += usage.get("total_tokens") or 0
                where = {"id": cid, "slot": "evaluate", "split": split, "attempt": attempt}
                self.emit(E.UsageSpent(**where, tokens=usage["total_tokens"], **usage))

        return {
            **hooks,
            "on_built": on_built,
            "on_usage": on_usage,
            "token_limit": self.reserve_tokens(threading.get_ident(), split == "sealed"),
        }

    def gateway_hooks(
        self, cid: str, split: str, opened: list[Any] | None = None
    ) -> dict[str, Any]:
        """``model_endpoint``: opens the evaluation's own endpoint to the declared model its
        agent uses, metered to ``cid`` under slot ``evaluate`` (none without a model)."""
        model = getattr(self.evaluator.config, "model", None)
        if model is None or self.gateway is None:
            return {}  # the engine says why when a model has no gateway
        if self.executor.kind != "local":
            raise RuntimeError(
                f"evaluator.config.model reaches the run's gateway on this host only; "
                f"the {self.executor.kind} executor cannot"
            )
        gw = self.gateway

        def model_endpoint() -> Any:
            name = f"evaluate:{split}:{cid}"
            ep = gw.sandbox_endpoint(
                name, model=model, candidate=cid, slot="evaluate", anchor=split == "sealed"
            )
            if opened is not None:
                opened.append(ep)
            return ep

        return {"model_endpoint": model_endpoint}

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

        opened: list[Any] = []  # the evaluation's gateway endpoints, revoked after it
        refused: list[int] = []  # its served model's refusals for the budget
        hooks = self.model_hooks(cid, split, attempt, opened, refused)
        try:
            # executor hook (issue 11.3): the one place an evaluation of a verified export runs
            out = self.executor.run(
                self.evaluator, self.taskset, candidate_dir, task_ids, self.put, on_done, **hooks
            )
        finally:
            self.release_tokens(threading.get_ident())
            called = self._revoke(opened)  # its calls become model_call events now
        self.timings.add(self.timings.tasks, cid, out.task_seconds)
        why = _budget_refusal(called, sum(refused))
        if why is not None:
            raise BudgetRefused(
                f"{why}; not certified, as its score would be the budget's, not the candidate's"
            )
        return out if called is None else dataclasses.replace(out, models_called=called["models"])

    def _revoke(self, opened: list[Any]) -> dict[str, Any] | None:
        """Revoke an evaluation's gateway endpoints; what its agent called, per model
        (``models``), and the gateway's refusals among its calls by code (``refusals``);
        None: the evaluator gives its agent no model."""
        revoke = getattr(self.gateway, "revoke_endpoints", None)
        if getattr(self.evaluator.config, "model", None) is None or revoke is None:
            return None
        return revoke(*opened) if opened else {"models": {}, "refusals": {}}

    def instructions(self, task_ids: list[str]) -> dict[str, str]:
        """Each task's instruction (train tasks: what operators may show a model)."""
        return {t: self.taskset.tasks[t].instruction for t in task_ids if t in self.taskset.tasks}

    @staticmethod
    def rows(out: EvaluationOutput) -> list[dict[str, Any]]:
        """Uncertified task runs as operators see them (reward, error, trajectory, tails,
        and what the verifier said)."""
        tails = ("stdout_tail", "stderr_tail")
        return [
            {
                "task": r.task_id,
                "reward": r.reward,
                "error": r.error,
                "trajectory": r.trajectory_digest,
                **{k: r.trajectory.get("agent", {}).get(k, "") for k in tails},
                "verifier_tail": _verifier_tail(r.trajectory),
                "app_changed": (r.trajectory.get("app") or {}).get("changed"),
            }
            for r in sorted(out.runs.values(), key=lambda r: r.task_id)
        ]


def _budget_refusal(called: dict[str, Any] | None, served_refused: int) -> str | None:
    """Why an evaluation's agent was refused a model call for the run's budget: by the
    gateway (``called``: its endpoints' report) or by its served model (None: it was not)."""
    by_code = {k: v for k, v in (called or {}).get("refusals", {}).items() if k in E.BUDGET_CODES}
    if by_code:
        codes = ", ".join(sorted(by_code))
        return (
            f"the model gateway refused this evaluation's agent a call for the run's budget "
            f"({codes}): {next(iter(by_code.values()))}"
        )
    if served_refused:
        return (
            f"the served model refused this evaluation's agent {served_refused} request(s) "
            f"for the run's budget (max_model_tokens)"
        )
    return None


def _verifier_tail(trajectory: dict[str, Any]) -> str:
    verifier = trajectory.get("verifier") or {}
    return (verifier.get("stdout_tail", "") + "\n" + verifier.get("stderr_tail", "")).strip()


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
        models_called=out.models_called,
        started_at=started,
        finished_at=time.time(),
    )
