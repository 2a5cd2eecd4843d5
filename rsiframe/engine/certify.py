"""Certify: a finished evaluation becomes one signed record, the only way scores are made.

The evaluation itself (:mod:`rsiframe.engine.evaluation`) may run anywhere; only the
process holding the run's key calls :func:`certify`, and the record binds the run,
the candidate's commit, tree and parent, the recipe, the evaluator and the task set.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from rsiframe import __version__
from rsiframe.archive.events import EvaluationCertified
from rsiframe.certs.records import EvaluationPredicate, aggregate, make_statement
from rsiframe.certs.signing import Signer
from rsiframe.recipe.evaluator import ENGINES
from rsiframe.slots.identity import file_digest


@dataclass(frozen=True)
class Binding:
    """What every record of a run binds besides the candidate (from ``run_started``)."""

    run_id: str
    recipe_digest: str
    evaluator_fingerprint: str
    taskset_fingerprint: str
    isolation: str
    #: the evaluator's and the gate's code identity, as locked (rsiframe.slots.identity)
    code: dict[str, Any] | None = None
    #: the engine's own part of each record (harbor: engine, Harbor version, environment)
    evaluator: dict[str, Any] | None = None


@dataclass(frozen=True)
class FinishedEvaluation:
    """One attempt's results on one split, as the evaluation returns them."""

    candidate: str
    commit: str
    tree: str
    parent_commit: str | None
    split: str
    attempt: int
    rewards: dict[str, float]
    errors: dict[str, str]
    trajectories: dict[str, str]
    model: dict[str, Any] | None
    started_at: float
    finished_at: float
    executor: dict[str, Any] | None = None  # where it ran: kind and worker node
    #: the models its agent called through the gateway, with their token counts
    models_called: dict[str, dict[str, int]] | None = None


def certify(done: FinishedEvaluation, binding: Binding, signer: Signer) -> EvaluationCertified:
    """The signed ``evaluation_certified`` event of a finished evaluation."""
    predicate = EvaluationPredicate(
        run_id=binding.run_id,
        candidate=done.candidate,
        parent_commit=done.parent_commit,
        recipe_digest=binding.recipe_digest,
        evaluator_fingerprint=binding.evaluator_fingerprint,
        taskset_fingerprint=binding.taskset_fingerprint,
        split=done.split,
        attempt=done.attempt,
        rewards=done.rewards,
        errors=done.errors,
        trajectories=done.trajectories,
        score=aggregate(done.rewards),
        isolation=binding.isolation,
        model=done.model,
        code=binding.code,
        executor=done.executor,
        models_called=done.models_called,
        evaluator=binding.evaluator,
        framework_version=__version__,
        started_at=done.started_at,
        finished_at=done.finished_at,
    )
    envelope = signer.sign(make_statement(done.commit, done.tree, predicate))
    return EvaluationCertified(
        id=done.candidate, split=done.split, attempt=done.attempt, envelope=envelope
    )


def evaluator_identity(engine: str) -> dict[str, Any]:
    """The evaluator engine's code identity, for certificates (its file found by its module
    path in the engine table, never imported here)."""
    file = _module_file(ENGINES[engine].module) if engine in ENGINES else None
    return {"engine": engine, "file": file, "sha256": file_digest(file), "rsiframe": __version__}


def _module_file(module: str) -> str | None:
    found = importlib.util.find_spec(module)
    return str(Path(found.origin).resolve()) if found and found.origin else None


@cache
def certified_code(recipe_lock: Path) -> dict[str, Any]:
    """The evaluator part of a certificate's code identity: the evaluator engine's code and
    the gate operator's, as the run locked them (``resume`` refuses a change)."""
    lock = json.loads(recipe_lock.read_text())
    engine = lock["resolved"]["evaluator"]["engine"]
    return {
        "evaluator": evaluator_identity(engine),
        "gate": (lock.get("operators") or {}).get("gate"),
    }
