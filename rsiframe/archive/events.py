"""Every event type of ``events.jsonl``, one pydantic model each (the bottom layer).

The engine appends only these models (:func:`payload`) and ``state.py`` folds only
these (:func:`parse`). Each type has exactly one key set: optional keys have
defaults, so lines of older archives that lack them still parse, while a key no
model declares makes the line malformed.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field


class EventData(BaseModel):
    """The ``data`` of one event; ``type`` is the event's name in the archive."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type: ClassVar[str] = ""


class AttemptEvent(EventData):
    """An event about one evaluation attempt: candidate, split, attempt number."""

    id: str
    split: str
    attempt: int


# -- the run and its sessions ---------------------------------------------------------


class RunStarted(EventData):
    type = "run_started"
    run_id: str
    name: str
    recipe_digest: str
    taskset_fingerprint: str
    evaluator_fingerprint: str
    isolation: str
    keyid: str
    framework_version: str = ""  # older archives may lack it
    seed_commit: str
    seed_tree: str
    #: digest of the operator code identities in recipe.lock.json (rsiframe.slots.identity)
    operators_digest: str | None = None
    #: what the run warned about as it began (rsiframe.engine.startwarnings)
    warnings: list[str] = Field(default_factory=list)


class SessionStarted(EventData):
    type = "session_started"
    resumed: bool = False
    retry_failed: bool = False


class GenerationStarted(EventData):
    type = "generation_started"
    generation: int


class RunInterrupted(EventData):
    type = "run_interrupted"
    reason: str = ""


class RunFinished(EventData):
    type = "run_finished"
    state: str
    reason: str = ""


# -- a candidate's transaction ----------------------------------------------------------


class CandidateProposed(EventData):
    type = "candidate_proposed"
    id: str
    parent: str | None
    generation: int
    reason: str = ""
    #: where select placed the child (an island, a MAP-Elites cell); empty otherwise
    placement: dict[str, Any] = {}
    #: a merge's two parents ``[first, second]`` (``parent`` is the first); empty otherwise
    parents: list[str] = []
    #: a proposal that retakes one a kill cut after its model calls were paid: the candidate
    #: whose RNG and model requests it repeats, so the gateway answers them from its ledger
    draws: str | None = None


class RolloutDone(EventData):
    type = "rollout_done"
    id: str
    rollout: str
    reused: bool = False


class TasksRun(EventData):
    """Uncertified task runs (validate's minibatch, a rollout's ``run_train``), charged to
    ``budget.max_task_runs`` before they start."""

    type = "tasks_run"
    id: str
    purpose: str  # minibatch | rollout
    tasks: int
    task_ids: list[str] = Field(default_factory=list)  # which ones (GEPA: the same for both)


class AnalysisDone(EventData):
    type = "analysis_done"
    id: str
    analysis: str


class CandidateMutated(EventData):
    type = "candidate_mutated"
    id: str
    commit: str
    tree: str
    parent_commit: str | None = None
    description: str = ""
    changes: list[dict[str, Any]] = Field(default_factory=list)
    mutation: str | None = None  # artifact: the operator's Mutation result
    sandbox: dict[str, Any] = Field(default_factory=dict)  # isolation used per slot
    #: a merge's second parent commit (the git merge commit's other parent)
    merged_commit: str | None = None
    #: the evaluation stages it must pass, in order (staged evaluation); empty: train, gate
    splits: list[str] = Field(default_factory=list)


class CandidateRejected(EventData):
    """A candidate ended before (or by) its build, or stopped at an evaluation stage
    (``stage: evaluate``, ``details.stopped_at``): the stage and why, with evidence."""

    type = "candidate_rejected"
    id: str
    stage: str
    reasons: list[str]
    violations: list[dict[str, Any]] = Field(default_factory=list)
    commit: str | None = None  # the rejected tree kept as evidence, or the built commit
    description: str = ""
    output: str = ""
    sandbox: dict[str, Any] = Field(default_factory=dict)
    traceback: str | None = None  # artifact: an operator's traceback
    details: dict[str, Any] | None = None  # a build's details (audit, step logs)
    #: the tree it would have committed, for a rejection after the duplicate check (validate,
    #: novelty): a later child with this tree is a duplicate, never evaluated
    tree: str | None = None
    #: artifact: the mutate operator's report (``Mutation``) of a child rejected after
    #: its mutation (guardrail to novelty), e.g. the model a bandit chose for it
    mutation: str | None = None


class CandidateAbandoned(EventData):
    """A proposal that ended without an outcome. ``cause``: ``cut`` (a driver died or stopped
    during its mutation: the generation gets another child in its place) or ``model_outage``
    (its operator's model failed for infrastructure reasons: a proposal spent, not a
    rejection of the method)."""

    type = "candidate_abandoned"
    id: str
    reason: str = ""
    cause: Literal["cut", "model_outage"] = "cut"


# -- evaluation -------------------------------------------------------------------------


class EvaluationStarted(AttemptEvent):
    type = "evaluation_started"
    tasks: int | None = None  # the tasks it runs, charged to max_task_runs (older: None)


class TaskFinished(AttemptEvent):
    type = "task_finished"
    task: str
    reward: float | None = None
    error: str | None = None
    trajectory: str | None = None


class ModelBuilt(AttemptEvent):
    type = "model_built"
    model: dict[str, Any]


class EvaluationCertified(AttemptEvent):
    type = "evaluation_certified"
    envelope: dict[str, Any]


class EvaluationFailed(AttemptEvent):
    type = "evaluation_failed"
    error: str = ""
    traceback: str | None = None  # artifact
    build: dict[str, Any] | None = None  # a rejected build's details


class EvaluationInterrupted(AttemptEvent):
    type = "evaluation_interrupted"


class UsageSpent(EventData):
    """Model tokens and cost charged to the budget (an operator's, or an evaluation's)."""

    type = "usage"
    id: str
    slot: str
    split: str | None = None
    attempt: int | None = None
    tokens: int = 0
    cost: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    requests: int | None = None
    refused: int | None = None
    cancelled: int | None = None  # requests the server stopped (client gone, evaluation over)
    queue_s: float | None = None  # seconds the requests waited for the model (D/T/H server)
    queue_max_s: float | None = None  # the longest such wait


class ModelCall(EventData):
    """One call through the run's model gateway, as its ledger recorded it (issue 13).

    The gateway's fsynced ledger (``model-calls/ledger.jsonl``) is the record of what was
    paid; each of its entries becomes one of these, in ledger order (``seq``), so the
    run's totals are the gateway's own count. ``request`` and ``response`` are run
    artifacts (content-addressed).
    """

    type = "model_call"
    seq: int  # the ledger entry's number (1, 2, ...): resume catches up from the last one
    candidate: str | None = None
    slot: str | None = None
    consumer: str = ""
    model: str = ""
    path: str = ""
    status: int = 200
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    cached: bool = False  # served from the ledger at no cost (resume, replay)
    usage_source: str = "provider"  # provider | estimate
    digest: str = ""  # the request digest (the gateway's cache key)
    request: str | None = None  # artifact
    response: str | None = None  # artifact
    stream: bool = False
    error: str | None = None
    #: why the gateway refused: max_model_tokens | max_cost (the run's budget) | allowance
    #: (429), model_not_allowed (403: the token was not given that model), invalid_limit (400)
    code: str | None = None
    reserved_tokens: int = 0  # the call's reservation (prompt estimate + every output choice)
    rewritten: str | None = None  # a limit the gateway added to the forwarded body
    excess_tokens: int = 0  # output the provider reported past the reservation: not charged
    excess_cost_usd: float = 0.0
    violation: str | None = None  # provider_excess


#: the codes of the gateway's refusals for the run's budget (an ``allowance`` is one
#: operation's own cap, not the run's)
BUDGET_CODES = ("max_model_tokens", "max_cost")

#: what the gateway records for a provider's failure (unreachable, 5xx or 429 after its
#: retries: HTTP 502; or refused the key or the model: 401, 403, 404)
UPSTREAM = "upstream"
#: HTTP statuses of an upstream failure that mean the endpoint, not the request, is broken
_INFRASTRUCTURE = (401, 403, 404, 502)


def infrastructure_failure(status: int, code: str | None) -> bool:
    """Whether a call failed for infrastructure reasons: the provider unreachable, failing
    after its retries, or refusing the key or the model (a 400 is the request's own fault)."""
    if status == 502:  # the gateway's "failed after N attempts" (older archives: no code)
        return True
    return code == UPSTREAM and status in _INFRASTRUCTURE


class ModelsChecked(EventData):
    """``run`` and ``resume`` checked every declared model with one tiny call before the first
    generation: metered apart, never charged to the run's model budget."""

    type = "models_checked"
    #: one row per model: {"model", "tokens", "cost_usd", "latency_ms"}
    checks: list[dict[str, Any]] = Field(default_factory=list)


# -- after evaluation -------------------------------------------------------------------


class CandidateGated(EventData):
    """The gate's decision; or, with ``stopped``, a child a staged evaluation archived at
    the stage it stopped at (``on_fail: archive``, DGM): admitted with that stage's score,
    its details (``stopped_at``, ``score``, ``min_score``) as the stop would give them."""

    type = "candidate_gated"
    id: str
    admit: bool
    reason: str = ""
    stopped: dict[str, Any] | None = None


class CandidateRecorded(EventData):
    type = "candidate_recorded"
    id: str
    notes: dict[str, Any] | None = None


class GenerationReflected(EventData):
    type = "generation_reflected"
    generation: int
    lessons: str  # artifact


class InformationFlowViolation(EventData):
    type = "information_flow_violation"
    slot: str | None = None
    operator: str | None = None
    candidate: str | None = None
    asked: str
    detail: str = ""


EVENT_TYPES: dict[str, type[EventData]] = {
    cls.type: cls
    for cls in (
        RunStarted,
        SessionStarted,
        GenerationStarted,
        RunInterrupted,
        RunFinished,
        CandidateProposed,
        RolloutDone,
        TasksRun,
        AnalysisDone,
        CandidateMutated,
        CandidateRejected,
        CandidateAbandoned,
        EvaluationStarted,
        TaskFinished,
        ModelBuilt,
        EvaluationCertified,
        EvaluationFailed,
        EvaluationInterrupted,
        UsageSpent,
        ModelCall,
        ModelsChecked,
        CandidateGated,
        CandidateRecorded,
        GenerationReflected,
        InformationFlowViolation,
    )
}


class UnknownEvent(ValueError):
    """An event type no model declares."""


def parse(type_: str, data: dict[str, Any]) -> EventData:
    """The model of one archived event; raises ``ValueError`` on an unknown or bad one."""
    cls = EVENT_TYPES.get(type_)
    if cls is None:
        raise UnknownEvent(f"unknown event type {type_!r}")
    return cls.model_validate(data)


def payload(event: EventData) -> dict[str, Any]:
    """The JSON ``data`` written for ``event``: every key of its type, always."""
    return event.model_dump(mode="json")
