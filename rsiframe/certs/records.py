"""Certified records: the in-toto statement a run signs for every evaluation.

The statement's subject is the candidate commit (and its tree); the predicate
binds parent, recipe digest, evaluator fingerprint, task-set fingerprint,
split, per-task rewards, aggregate score, isolation level, model identity and
framework version. Scores are read from here and nowhere else.

``model`` is set for D/T/H candidates (an evaluator with a ``build`` config): the model
name, ``model_digest`` (its file manifest), ``weights_digest`` and ``config_digest``
(sha256 of ``model.safetensors`` and ``config.json``), ``dataset_digest``,
``build_inputs_digest`` and ``build_manifest`` (the artifact naming the dataset, model
files and build inputs), per-step cache hits and seconds, ``training_seconds``,
``train_metrics``, the ``contamination`` audit (sealed: counts only), the ``tokens`` the
evaluation used, and the serving ``backend``.

``models_called`` is set when the evaluator gives the candidate's agent a declared model
(``evaluator.config.model``): each model the agent's calls named through the run's gateway,
with ``calls`` answered, ``prompt_tokens`` and ``completion_tokens`` charged, ``cached``
(answered from the ledger) and ``refused`` (e.g. a model its token was not given: 403).

``executor`` says where the evaluation ran: ``kind`` (``local`` or ``ray``) and the worker
``node`` (for Ray: the node id, ``hostname`` and worker ``pid``, and with a D/T/H build,
``build``: the same for the Ray task that built the model); the driver signs either way.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://rsiframe.dev/evaluation/v1"


class EvaluationPredicate(BaseModel):
    """What one certified evaluation asserts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    candidate: str
    parent_commit: str | None
    recipe_digest: str
    evaluator_fingerprint: str
    taskset_fingerprint: str
    split: str
    attempt: int
    rewards: dict[str, float]
    errors: dict[str, str] = {}
    trajectories: dict[str, str] = {}
    score: float
    isolation: str
    model: dict[str, Any] | None = None
    # the evaluator engine's and the gate operator's code identity (rsiframe.slots.identity)
    code: dict[str, Any] | None = None
    executor: dict[str, Any] | None = None  # where it ran: kind (local, ray) and worker node
    #: the engine's own part: for ``harbor``, the engine, Harbor's version, the environment
    evaluator: dict[str, Any] | None = None
    #: the models the agent called through the gateway, per model (see the module doc)
    models_called: dict[str, dict[str, int]] | None = None
    framework_version: str
    started_at: float
    finished_at: float


class CertifiedRecord(BaseModel):
    """A verified statement: subject commit/tree plus its predicate."""

    model_config = ConfigDict(frozen=True)

    commit: str
    tree: str
    predicate: EvaluationPredicate


def make_statement(commit: str, tree: str, predicate: EvaluationPredicate) -> dict[str, Any]:
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {
                "name": f"candidate/{predicate.candidate}",
                "digest": {"gitCommit": commit, "gitTree": tree},
            }
        ],
        "predicateType": PREDICATE_TYPE,
        # records of engines without an evaluator part stay as they always were
        "predicate": predicate.model_dump(
            mode="json",
            exclude={k for k in ("evaluator", "models_called") if getattr(predicate, k) is None},
        ),
    }


def parse_statement(statement: dict[str, Any]) -> CertifiedRecord:
    """Read a (verified) statement back; raises ValueError when it is not ours."""
    if statement.get("_type") != STATEMENT_TYPE or statement.get("predicateType") != PREDICATE_TYPE:
        raise ValueError("not an rsiframe evaluation statement")
    subject = statement["subject"][0]["digest"]
    return CertifiedRecord(
        commit=subject["gitCommit"],
        tree=subject["gitTree"],
        predicate=EvaluationPredicate.model_validate(statement["predicate"]),
    )


def aggregate(rewards: dict[str, float]) -> float:
    """The aggregate score of a split: the mean reward (0 for no tasks)."""
    return sum(rewards.values()) / len(rewards) if rewards else 0.0
