"""Run state as a fold over archive events.

Scores enter the state only through :meth:`RunState.apply` of an
``evaluation_certified`` event whose envelope verifies under the run's public
key and binds this run, this candidate's commit and tree, the recipe digest,
the evaluator and the task-set fingerprint. Anything else is a *problem*
(listed by ``verify``) and never a score.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rsiframe.archive import events as E
from rsiframe.archive.log import Event
from rsiframe.certs.records import CertifiedRecord, parse_statement
from rsiframe.certs.signing import BadSignature, RecordVerifier
from rsiframe.errors import ArchiveCorrupt

#: consecutive calls to one model failing for infrastructure reasons that end a run failed
OUTAGE_CALLS = 3

CANDIDATE_STATES = (
    "proposed",
    "mutated",
    "rejected",
    "evaluating",
    "certified",
    "admitted",
    "declined",
    "failed",
    "abandoned",
)
SEED_SPLITS = ("train", "gate", "sealed")
CHILD_SPLITS = ("train", "gate")


@dataclass
class Attempt:
    split: str
    attempt: int
    status: str  # running | certified | failed | interrupted | invalid
    record: CertifiedRecord | None = None
    error: str | None = None
    tasks: int | None = None  # the tasks it was charged for (None: an older archive's)
    #: model tokens its agents' calls took from the budget: each gateway call's reservation
    #: or spend, whichever is more (the gateway admits a call on its reservation), and a
    #: served model's usage
    tokens: int = 0


@dataclass
class Candidate:
    id: str
    parent: str | None
    generation: int
    index: int
    commit: str | None = None
    tree: str | None = None
    parent_commit: str | None = None
    description: str = ""
    changes: list[dict[str, Any]] = field(default_factory=list)
    attempts: dict[str, list[Attempt]] = field(default_factory=dict)
    rejected: dict[str, Any] | None = None
    abandoned: str | None = None
    decision: dict[str, Any] | None = None
    notes: dict[str, Any] | None = None
    recorded: bool = False
    rollout: str | None = None
    analysis: str | None = None
    mutation: str | None = None  # artifact: the mutate operator's result (its details)
    model: dict[str, Any] | None = None  # the latest model_built (D/T/H builds)
    placement: dict[str, Any] = field(default_factory=dict)  # island, cell (select's placement)
    second_parent: str | None = None  # a merge's second parent
    merged_commit: str | None = None  # its commit (the merge commit's second git parent)
    splits: tuple[str, ...] = ()  # its evaluation stages (staged evaluation); empty: default
    uncertified_runs: int = 0  # task runs of its rollout and validate minibatch (tasks_run)
    draws: str | None = None  # the cut proposal whose RNG and model requests it repeats
    abandoned_cause: str | None = None  # cut | model_outage (candidate_abandoned)

    @property
    def parents(self) -> list[str]:
        """Every parent, first (``parent``) first; two for a merge."""
        return [p for p in (self.parent, self.second_parent) if p is not None]

    @property
    def stopped_at(self) -> str | None:
        """The evaluation stage a staged evaluation stopped it at (None: it did not stop)."""
        details = (self.rejected or {}).get("details") or (self.decision or {}).get("stopped")
        return (details or {}).get("stopped_at")

    @property
    def is_seed(self) -> bool:
        return self.parent is None

    @property
    def required_splits(self) -> tuple[str, ...]:
        return SEED_SPLITS if self.is_seed else (self.splits or CHILD_SPLITS)

    def latest(self, split: str) -> Attempt | None:
        tries = self.attempts.get(split)
        return tries[-1] if tries else None

    def record(self, split: str) -> CertifiedRecord | None:
        for a in reversed(self.attempts.get(split, [])):
            if a.status == "certified":
                return a.record
        return None

    def score(self, split: str) -> float | None:
        rec = self.record(split)
        return rec.predicate.score if rec else None

    @property
    def state(self) -> str:
        if self.abandoned is not None:
            return "abandoned"
        if self.rejected is not None:
            return "rejected"
        if self.decision is not None:
            return "admitted" if self.decision["admit"] else "declined"
        if self.commit is None:
            return "proposed"
        started = False
        certified = True
        for split in self.required_splits:
            last = self.latest(split)
            if self.record(split) is None:
                certified = False
                if last is not None and last.status in ("failed", "invalid"):
                    return "failed"
            if last is not None:
                started = True
        if certified:
            return "certified"
        return "evaluating" if started else "mutated"

    def next_split(self) -> str | None:
        """The first required split with no certified record yet."""
        for split in self.required_splits:
            if self.record(split) is None:
                return split
        return None

    def unstarted_split(self) -> str | None:
        """The first required split with no certified record and no attempt running."""
        for split in self.required_splits:
            last = self.latest(split)
            if self.record(split) is None and (last is None or last.status != "running"):
                return split
        return None

    def open_attempt(self) -> Attempt | None:
        for tries in self.attempts.values():
            if tries and tries[-1].status == "running":
                return tries[-1]
        return None


@dataclass
class RunState:
    """Everything the engine and the reports know about a run, rebuilt from events."""

    verifier: RecordVerifier
    run_id: str = ""
    name: str = ""
    recipe_digest: str = ""
    taskset_fingerprint: str = ""
    evaluator_fingerprint: str = ""
    isolation: str = ""
    seed_commit: str = ""
    seed_tree: str = ""
    started_at: float = 0.0
    last_ts: float = 0.0
    candidates: dict[str, Candidate] = field(default_factory=dict)
    generation: int = 0
    proposed_in: dict[int, int] = field(default_factory=dict)
    reflected: dict[int, str] = field(default_factory=dict)
    evaluations: int = 0
    #: every task execution: certified attempts (charged as they start), minibatch and
    #: rollout runs (tasks_run); budget.max_task_runs counts these
    task_runs: int = 0
    task_runs_refused: str | None = None  # a minibatch or rollout the budget refused: why
    tokens: int = 0
    tokens_refused: int = 0  # requests the model server refused: the allowance could not cover them
    cost: float = 0.0
    #: what evaluations' served models (D/T/H) spent: the part of ``tokens`` and ``cost``
    #: the run's gateway does not count itself
    served_tokens: int = 0
    served_cost: float = 0.0
    terminal: dict[str, Any] | None = None
    wall_closed: float = 0.0  # wall seconds of finished sessions
    session_start: float | None = None
    problems: list[str] = field(default_factory=list)
    #: the run's start warnings (``run_started``): a config valid but likely not meant
    warnings: list[str] = field(default_factory=list)
    records: int = 0
    lessons_digest: str | None = None
    #: model tokens and cost each candidate's operators (mutate, ...) spent (gateway count)
    operator_usage: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: calls through the run's model gateway (model_call events): count, and per slot
    #: {slot: {"cost_usd", "model_tokens", "model_calls"}}
    model_calls: int = 0
    models_by_slot: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ledger entries folded: all up to ``model_seq``, and those in ``model_ahead`` (workers
    #: may hand entries to the writer out of order); resume emits the others
    model_seq: int = 0
    model_ahead: list[int] = field(default_factory=list)
    #: the gateway refused a call for the run's budget (max_model_tokens / max_cost): why,
    #: and the refusal's code
    model_refused: str | None = None
    model_refused_code: str | None = None
    #: calls answered from the gateway's ledger at no cost (among ``model_calls``)
    model_cached: int = 0
    #: the tiny calls ``run``/``resume`` checked the models with, metered apart from the
    #: run's budget: {"calls", "tokens", "cost_usd"}
    model_check: dict[str, Any] = field(default_factory=dict)
    #: per model, this session's consecutive infrastructure failures: [count, last error]
    outage_streak: dict[str, list[Any]] = field(default_factory=dict)
    #: a model failing OUTAGE_CALLS times in a row this session: {"model", "calls", "error"}
    model_outage: dict[str, Any] | None = None
    #: proposals a kill cut after their model calls were paid, not yet retaken: the
    #: candidate whose draws the next proposal repeats -> its parent
    retakes: dict[str, str] = field(default_factory=dict)
    #: proposals cut by a driver that died or stopped, or ended by a model outage (no child:
    #: the generation gets another)
    cut: int = 0
    #: operators' attempts to read beyond their slot's view (information_flow_violation)
    violations: list[dict[str, Any]] = field(default_factory=list)
    # -- indexes kept as events fold, so no per-step query scans every candidate ------
    #: candidates that may still need a step (not rejected, abandoned or recorded, or with
    #: an open attempt), in proposal order
    active: dict[str, Candidate] = field(default_factory=dict, repr=False)
    #: admitted candidates as (index, id), in proposal order
    admitted_ids: list[tuple[int, str]] = field(default_factory=list, repr=False)
    #: admitted candidates with a gate score as (-score, index, id): best first, older on ties
    gate_ranking: list[tuple[float, int, str]] = field(default_factory=list, repr=False)
    #: ids of admitted candidates in the order they were admitted (append-only)
    admission_log: list[str] = field(default_factory=list, repr=False)
    #: trees of candidates not rejected, with the generation of each candidate that has it
    tree_holders: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    #: the latest generation of an admitted candidate (-1: none), so a view with a
    #: generation horizon knows when the ranking needs no filtering
    admitted_generation: int = field(default=-1, repr=False)
    #: the most model tokens and cost any child past its mutation spent in its operators
    #: (None: no such child spent anything), for the budget's in-flight estimate
    spent_max: tuple[int, float] | None = field(default=None, repr=False)
    #: rollouts and analyses recorded (``rollout_done``, ``analysis_done``): with
    #: ``records`` it tells a view when the artifacts operators may read have changed
    evidence_events: int = field(default=0, repr=False)
    #: the most model tokens per task any evaluation attempt spent so far, for the budget's
    #: hold on what the champion's sealed evaluation and children in flight will need
    eval_tokens_per_task: float = field(default=0.0, repr=False)
    INDEXES: ClassVar[tuple[str, ...]] = (
        "active",
        "admitted_ids",
        "gate_ranking",
        "admission_log",
        "tree_holders",
        "admitted_generation",
        "spent_max",
        "evidence_events",
        "eval_tokens_per_task",
    )

    # -- folding ---------------------------------------------------------------------

    def apply(self, ev: Event) -> None:
        """Fold one event: its data must parse as the model of its type (``events.py``)."""
        try:
            d = E.parse(ev.type, ev.data)
        except E.UnknownEvent as exc:
            raise ArchiveCorrupt(f"event {ev.seq}: {exc}") from exc
        except ValueError as exc:
            raise ArchiveCorrupt(f"event {ev.seq} ({ev.type}) is malformed: {exc!r}") from exc
        try:
            getattr(self, "_on_" + ev.type)(ev, d)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ArchiveCorrupt(f"event {ev.seq} ({ev.type}) is malformed: {exc!r}") from exc
        self.last_ts = ev.ts
        cid = ev.data.get("id")
        if isinstance(cid, str) and (c := self.candidates.get(cid)) is not None:
            self._index_active(c)
            self._index_spent(c)
        elif ev.type == "model_call" and (c := self.candidates.get(str(ev.data.get("candidate")))):
            self._index_spent(c)

    # -- indexes -------------------------------------------------------------------

    def _index_active(self, c: Candidate) -> None:
        done = c.rejected is not None or c.abandoned is not None or c.recorded
        if done and c.open_attempt() is None:
            self.active.pop(c.id, None)
        elif c.id not in self.active:
            self.active[c.id] = c

    def _index_spent(self, c: Candidate) -> None:
        """Raise :attr:`spent_max` to what ``c``'s operators spent, once it is past its
        mutation (usage only grows and a candidate never returns to ``proposed``, so the
        maximum is kept as events fold instead of scanning every candidate per proposal)."""
        spent = self.operator_usage.get(c.id)
        if spent is None or c.is_seed or c.state == "proposed":
            return
        top = self.spent_max
        self.spent_max = spent if top is None else (max(top[0], spent[0]), max(top[1], spent[1]))

    def _index_eval_tokens(self, a: Attempt) -> None:
        """Raise :attr:`eval_tokens_per_task` to ``a``'s tokens per task (they only grow)."""
        if a.tasks:
            self.eval_tokens_per_task = max(self.eval_tokens_per_task, a.tokens / a.tasks)

    def _eval_tokens(self, cid: str | None, split: str, attempt: int | None, tokens: int) -> None:
        """Charge ``tokens`` to the evaluation attempt that spent them (``attempt`` None: the
        split's latest, as the gateway's consumer ``evaluate:{split}:{cid}`` names no
        attempt)."""
        c = self.candidates.get(cid or "")
        if c is None or not tokens:
            return
        a = c.latest(split) if attempt is None else self._attempt_of(c, split, attempt)
        if a is not None:
            a.tokens += tokens
            self._index_eval_tokens(a)

    def _index_admitted(self, c: Candidate) -> None:
        bisect.insort(self.admitted_ids, (c.index, c.id))
        self.admission_log.append(c.id)
        self.admitted_generation = max(self.admitted_generation, c.generation)
        score = c.score("gate")
        if score is not None:
            bisect.insort(self.gate_ranking, (-score, c.index, c.id))

    def reindex(self) -> None:
        """Rebuild every index from the candidates (after loading a snapshot)."""
        self.active, self.admitted_ids, self.gate_ranking = {}, [], []
        self.admission_log, self.tree_holders, self.admitted_generation = [], {}, -1
        self.spent_max, self.evidence_events, self.eval_tokens_per_task = None, 0, 0.0
        for c in self.candidates.values():
            self._index_active(c)
            self._index_spent(c)
            for tries in c.attempts.values():
                for a in tries:
                    self._index_eval_tokens(a)
            self.evidence_events += sum(d is not None for d in (c.rollout, c.analysis, c.mutation))
            if c.state == "admitted":
                self._index_admitted(c)
            if c.tree is not None and c.rejected is None:
                self.tree_holders.setdefault(c.tree, {})[c.id] = c.generation

    def _on_run_started(self, ev: Event, d: E.RunStarted) -> None:
        self.run_id = d.run_id
        self.name = d.name
        self.recipe_digest = d.recipe_digest
        self.taskset_fingerprint = d.taskset_fingerprint
        self.evaluator_fingerprint = d.evaluator_fingerprint
        self.isolation = d.isolation
        self.seed_commit, self.seed_tree = d.seed_commit, d.seed_tree
        self.warnings = list(d.warnings)
        self.started_at = ev.ts
        if d.keyid != self.verifier.keyid:
            self.problems.append("run_started names a different key than pubkey.pem")

    def _on_session_started(self, ev: Event, d: E.SessionStarted) -> None:
        self._close_session()
        self.session_start = ev.ts
        self.terminal = None
        self.outage_streak, self.model_outage = {}, None  # a new session checked its models

    def _close_session(self) -> None:
        if self.session_start is not None:
            self.wall_closed += max(0.0, self.last_ts - self.session_start)
            self.session_start = None

    def _on_generation_started(self, ev: Event, d: E.GenerationStarted) -> None:
        self.generation = d.generation

    def _on_candidate_proposed(self, ev: Event, d: E.CandidateProposed) -> None:
        c = Candidate(
            id=d.id,
            parent=d.parent,
            generation=d.generation,
            index=len(self.candidates),
            placement=dict(d.placement),
            second_parent=d.parents[1] if len(d.parents) > 1 else None,
            draws=d.draws,
        )
        self.candidates[c.id] = c
        if d.draws is not None:
            self.retakes.pop(d.draws, None)
        self.proposed_in[c.generation] = self.proposed_in.get(c.generation, 0) + 1

    def _on_rollout_done(self, ev: Event, d: E.RolloutDone) -> None:
        self.candidates[d.id].rollout = d.rollout
        self.evidence_events += 1

    def _on_analysis_done(self, ev: Event, d: E.AnalysisDone) -> None:
        self.candidates[d.id].analysis = d.analysis
        self.evidence_events += 1

    def _on_candidate_mutated(self, ev: Event, d: E.CandidateMutated) -> None:
        c = self.candidates[d.id]
        if c.tree is not None and c.rejected is None:
            self._untree(c)
        c.commit, c.tree, c.parent_commit = d.commit, d.tree, d.parent_commit
        if c.rejected is None:
            self.tree_holders.setdefault(d.tree, {})[c.id] = c.generation
        c.description = d.description
        c.mutation = d.mutation
        self.evidence_events += d.mutation is not None
        c.changes = list(d.changes)
        c.splits = tuple(d.splits)
        c.merged_commit = d.merged_commit

    def _on_candidate_rejected(self, ev: Event, d: E.CandidateRejected) -> None:
        c = self.candidates[d.id]
        if c.tree is not None and c.rejected is None:
            self._untree(c)
        c.rejected = E.payload(d)
        c.mutation = d.mutation or c.mutation
        self.evidence_events += d.mutation is not None
        if d.stage == "budget":  # a minibatch or rollout the task-run budget refused
            self.task_runs_refused = d.reasons[0] if d.reasons else "task runs refused"

    def _untree(self, c: Candidate) -> None:
        assert c.tree is not None
        holders = self.tree_holders.get(c.tree, {})
        holders.pop(c.id, None)
        if not holders:
            self.tree_holders.pop(c.tree, None)

    def _on_candidate_abandoned(self, ev: Event, d: E.CandidateAbandoned) -> None:
        c = self.candidates[d.id]
        c.abandoned, c.abandoned_cause = d.reason, d.cause
        if c.is_seed:
            return
        # a cut proposal, or one a model outage ended, is no child of the method: its
        # generation gets another in its place (after the resume)
        self.cut += 1
        self.proposed_in[c.generation] = self.proposed_in.get(c.generation, 1) - 1
        root = c.draws or c.id
        if d.cause != "cut" or c.second_parent is not None or c.parent is None:
            return
        if self._paid(c.id, root):
            self.retakes[root] = c.parent

    def _paid(self, *cids: str) -> bool:
        """Whether the gateway charged any of these candidates' operators for a call."""
        return any(self.operator_usage.get(cid, (0, 0.0))[0] > 0 for cid in cids)

    def _on_evaluation_started(self, ev: Event, d: E.EvaluationStarted) -> None:
        c = self.candidates[d.id]
        c.attempts.setdefault(d.split, []).append(
            Attempt(d.split, d.attempt, "running", tasks=d.tasks)
        )
        self.evaluations += 1
        self.task_runs += d.tasks or 0

    def _attempt(self, d: E.AttemptEvent) -> Attempt | None:
        c = self.candidates.get(d.id)
        return self._attempt_of(c, d.split, d.attempt) if c else None

    @staticmethod
    def _attempt_of(c: Candidate, split: str, attempt: int) -> Attempt | None:
        for a in c.attempts.get(split, []):
            if a.attempt == attempt:
                return a
        return None

    def _on_evaluation_certified(self, ev: Event, d: E.EvaluationCertified) -> None:
        self.records += 1
        a = self._attempt(d)
        where = f"event {ev.seq} ({d.id}/{d.split}#{d.attempt})"
        if a is None:
            self.problems.append(f"{where}: certificate for an evaluation that never started")
            return
        try:
            rec = parse_statement(self.verifier.open(d.envelope))
        except (BadSignature, ValueError, KeyError) as exc:
            a.status, a.error = "invalid", f"certificate rejected: {exc}"
            self.problems.append(f"{where}: {a.error}")
            return
        problem = self._binding_problem(self.candidates[d.id], d, rec)
        if problem:
            a.status, a.error = "invalid", f"certificate rejected: {problem}"
            self.problems.append(f"{where}: {a.error}")
            return
        a.status, a.record = "certified", rec

    def _binding_problem(self, c: Candidate, d: E.EvaluationCertified, rec: CertifiedRecord) -> str:
        p = rec.predicate
        checks = [
            (p.run_id == self.run_id, "bound to another run"),
            (p.candidate == c.id, f"bound to candidate {p.candidate}"),
            (rec.commit == c.commit and rec.tree == c.tree, "bound to another commit"),
            (p.parent_commit == c.parent_commit, "bound to another parent"),
            (p.split == d.split and p.attempt == d.attempt, "bound to another evaluation"),
            (p.recipe_digest == self.recipe_digest, "recipe digest differs"),
            (p.evaluator_fingerprint == self.evaluator_fingerprint, "evaluator differs"),
            (p.taskset_fingerprint == self.taskset_fingerprint, "task set differs"),
        ]
        return next((why for ok, why in checks if not ok), "")

    def _on_task_finished(self, ev: Event, d: E.TaskFinished) -> None:
        # evidence only: scores come from certificates; an older archive's attempt (no
        # task count at its start) is charged per task that finished
        a = self._attempt(d)
        if a is not None and a.tasks is None:
            self.task_runs += 1

    def _on_tasks_run(self, ev: Event, d: E.TasksRun) -> None:
        self.candidates[d.id].uncertified_runs += d.tasks
        self.task_runs += d.tasks

    def _on_evaluation_failed(self, ev: Event, d: E.EvaluationFailed) -> None:
        a = self._attempt(d)
        if a is not None:
            a.status, a.error = "failed", d.error

    def _on_evaluation_interrupted(self, ev: Event, d: E.EvaluationInterrupted) -> None:
        a = self._attempt(d)
        if a is not None:
            a.status = "interrupted"

    def _on_candidate_gated(self, ev: Event, d: E.CandidateGated) -> None:
        c = self.candidates[d.id]
        was = c.state == "admitted"
        c.decision = {"admit": d.admit, "reason": d.reason}
        if d.stopped is not None:  # archived at the stage it stopped at
            c.decision["stopped"] = d.stopped
        if c.state == "admitted" and not was:
            self._index_admitted(c)

    def _on_candidate_recorded(self, ev: Event, d: E.CandidateRecorded) -> None:
        c = self.candidates[d.id]
        c.notes, c.recorded = d.notes, True

    def _on_generation_reflected(self, ev: Event, d: E.GenerationReflected) -> None:
        self.reflected[d.generation] = d.lessons
        self.lessons_digest = d.lessons

    def _on_information_flow_violation(self, ev: Event, d: E.InformationFlowViolation) -> None:
        self.violations.append({"seq": ev.seq, **E.payload(d)})

    def _on_model_built(self, ev: Event, d: E.ModelBuilt) -> None:
        self.candidates[d.id].model = d.model

    def _on_usage(self, ev: Event, d: E.UsageSpent) -> None:
        if d.slot != "evaluate":
            # an operator's self-reported usage (older archives) decides nothing: the
            # gateway's own count (model_call) is what operators spent
            return
        self.tokens += d.tokens
        self.tokens_refused += d.refused or 0
        if d.split is not None:
            self._eval_tokens(d.id, d.split, d.attempt, d.tokens)
        self.cost += d.cost
        self.served_tokens += d.tokens
        self.served_cost += d.cost
        self.model_calls += d.requests or 0  # the totals are the sum of models_by_slot
        self._by_slot("evaluate", d.tokens, d.cost, d.requests or 0)

    def _on_model_call(self, ev: Event, d: E.ModelCall) -> None:
        tokens = d.prompt_tokens + d.completion_tokens
        self.tokens += tokens
        self.cost += d.cost_usd
        self.model_calls += 1
        self.model_cached += int(d.cached)
        self.model_ahead.append(d.seq)
        while self.model_seq + 1 in self.model_ahead:
            self.model_seq += 1
            self.model_ahead.remove(self.model_seq)
        self._by_slot(d.slot or "run", tokens, d.cost_usd, 1, int(d.cached))
        if d.candidate is not None and d.slot != "evaluate":
            spent = self.operator_usage.get(d.candidate, (0, 0.0))
            self.operator_usage[d.candidate] = (spent[0] + tokens, spent[1] + d.cost_usd)
        if d.slot == "evaluate" and d.consumer.startswith("evaluate:"):
            taken = max(tokens, d.reserved_tokens)
            self._eval_tokens(d.candidate, d.consumer.split(":")[1], None, taken)
        if d.status == 429 and d.code in E.BUDGET_CODES:
            self.model_refused = d.error or f"the gateway refused a call ({d.code})"
            self.model_refused_code = d.code
        self._track_outage(d)

    def _track_outage(self, d: E.ModelCall) -> None:
        """Count a model's consecutive infrastructure failures; a paid answer resets them."""
        if d.status == 200 and not d.cached:
            self.outage_streak.pop(d.model, None)
            return
        if not E.infrastructure_failure(d.status, d.code):
            return
        n = int(self.outage_streak.get(d.model, [0])[0]) + 1
        error = d.error or f"HTTP {d.status}"
        self.outage_streak[d.model] = [n, error]
        if n >= OUTAGE_CALLS and self.model_outage is None:
            self.model_outage = {"model": d.model, "calls": n, "error": error}

    def _on_models_checked(self, ev: Event, d: E.ModelsChecked) -> None:
        check = self.model_check or {"calls": 0, "tokens": 0, "cost_usd": 0.0}
        check["calls"] += len(d.checks)
        check["tokens"] += sum(int(row.get("tokens", 0)) for row in d.checks)
        check["cost_usd"] += sum(float(row.get("cost_usd", 0.0)) for row in d.checks)
        self.model_check = check

    def _by_slot(self, slot: str, tokens: int, cost: float, calls: int, cached: int = 0) -> None:
        row = self.models_by_slot.setdefault(
            slot, {"cost_usd": 0.0, "model_tokens": 0, "model_calls": 0, "cached_calls": 0}
        )
        row["cost_usd"] += cost
        row["model_tokens"] += tokens
        row["model_calls"] += calls
        row["cached_calls"] = row.get("cached_calls", 0) + cached

    def _on_run_interrupted(self, ev: Event, d: E.RunInterrupted) -> None:
        self.terminal = {"state": "interrupted", **E.payload(d)}
        self._close_session()

    def _on_run_finished(self, ev: Event, d: E.RunFinished) -> None:
        self.terminal = E.payload(d)
        self._close_session()

    # -- queries ---------------------------------------------------------------------

    def model_seen(self, seq: int) -> bool:
        """Whether the ledger entry ``seq`` is already a ``model_call`` event of the run."""
        return seq <= self.model_seq or seq in self.model_ahead

    @property
    def seed(self) -> Candidate | None:
        return next(iter(self.candidates.values()), None)

    def pending(self) -> list[Candidate]:
        """Candidates that may still need a step, in proposal order (the active index)."""
        return sorted(self.active.values(), key=lambda c: c.index)

    def admitted(self) -> list[Candidate]:
        """Admitted candidates in proposal order (from the index, not a scan)."""
        return [self.candidates[cid] for _, cid in self.admitted_ids]

    def ranked(self) -> list[Candidate]:
        """Admitted candidates with a gate score, best first (earliest on ties)."""
        return [self.candidates[cid] for _, _, cid in self.gate_ranking]

    def champion(self) -> Candidate | None:
        """The admitted candidate with the best verified gate score (earliest on ties)."""
        return self.candidates[self.gate_ranking[0][2]] if self.gate_ranking else None

    def wall_seconds(self, now: float | None = None) -> float:
        live = 0.0
        if self.session_start is not None:
            live = max(0.0, (now if now is not None else self.last_ts) - self.session_start)
        return self.wall_closed + live

    def children(self) -> int:
        """Proposals that count as the method's children (cut ones do not)."""
        seed = self.seed
        return len(self.candidates) - (1 if seed is not None and seed.is_seed else 0) - self.cut


def fold(events: list[Event], verifier: RecordVerifier) -> RunState:
    state = RunState(verifier=verifier)
    for ev in events:
        state.apply(ev)
    return state
