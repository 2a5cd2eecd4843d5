"""A run's event log written by hand, for unit tests of the engine's steps without a run.

:class:`SignedRun` appends typed events (``rsiframe.archive.events``) through a real
:class:`~rsiframe.archive.log.Archive`: each one signed with the run's key and chained to
the one before, then folded into :attr:`SignedRun.state` as the engine's writer does.
The archive notifies :attr:`SignedRun.hooks` of every event and the fold is the first
hook, as in the engine (``engine.loop``). Certificates are made by
:func:`rsiframe.engine.certify.certify`, the function the engine
calls, and bind what ``run_started`` declared. Commits and trees are made-up hex strings:
the fold compares them, it never opens a repository.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe.archive import events as E
from rsiframe.archive.log import Archive, Event
from rsiframe.archive.state import RunState
from rsiframe.certs.signing import EVENT_TYPE, Signer
from rsiframe.engine.certify import Binding, FinishedEvaluation, certify
from rsiframe.engine.hooks import Hooks, Lifecycle

RUN_ID = "run-unit"
BINDING = Binding(RUN_ID, "r" * 64, "e" * 64, "t" * 64, "process")
SEED = "c0000"


def commit_of(cid: str) -> str:
    """A made-up commit for candidate ``cid`` (40 hex digits, one per candidate)."""
    return hashlib.sha1(f"commit {cid}".encode()).hexdigest()


def tree_of(cid: str) -> str:
    return hashlib.sha1(f"tree {cid}".encode()).hexdigest()


class SignedRun:
    """Events appended, signed, chained and folded; helpers for the usual sequences."""

    def __init__(self, folder: Path, *, signer: Signer | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.signer = signer or Signer(Ed25519PrivateKey.generate())
        self.state = RunState(verifier=self.signer.public)
        self.hooks = Hooks()
        self.hooks.add_hook(Lifecycle.EVENT_WRITTEN, lambda notice: self.state.apply(notice.event))
        self.archive = Archive(
            folder,
            None,
            sign=lambda payload: self.signer.sign_bytes(EVENT_TYPE, payload),
            on_append=self.hooks.notify,
            group_commit=True,
        )
        self.binding = BINDING
        self.events: list[Event] = []

    def emit(self, data: E.EventData) -> Event:
        """Append ``data``; the archive's hooks fold it (the fold is the first hook)."""
        ev = self.archive.append(data.type, E.payload(data))
        self.events.append(ev)
        return ev

    # -- the usual sequences -------------------------------------------------------------

    def start(self, seed_commit: str | None = None, seed_tree: str | None = None) -> None:
        b = self.binding
        self.emit(
            E.RunStarted(
                run_id=b.run_id,
                name="unit",
                recipe_digest=b.recipe_digest,
                taskset_fingerprint=b.taskset_fingerprint,
                evaluator_fingerprint=b.evaluator_fingerprint,
                isolation=b.isolation,
                keyid=self.signer.keyid,
                seed_commit=seed_commit or commit_of(SEED),
                seed_tree=seed_tree or tree_of(SEED),
            )
        )
        self.emit(E.SessionStarted())

    def propose(self, cid: str, parent: str | None, generation: int) -> None:
        self.emit(E.CandidateProposed(id=cid, parent=parent, generation=generation))

    def mutate(self, cid: str, commit: str | None = None, tree: str | None = None) -> None:
        """``candidate_mutated`` (a made-up commit and tree unless given)."""
        parent = self.state.candidates[cid].parent
        parent_commit = self.state.candidates[parent].commit if parent is not None else None
        self.emit(
            E.CandidateMutated(
                id=cid,
                commit=commit or commit_of(cid),
                tree=tree or tree_of(cid),
                parent_commit=parent_commit,
            )
        )

    def start_evaluation(self, cid: str, split: str, tasks: int | None = None) -> int:
        """``evaluation_started`` of the next attempt on ``split``; its number."""
        attempt = len(self.state.candidates[cid].attempts.get(split, [])) + 1
        self.emit(E.EvaluationStarted(id=cid, split=split, attempt=attempt, tasks=tasks))
        return attempt

    def finished(
        self, cid: str, split: str, attempt: int, rewards: dict[str, float]
    ) -> FinishedEvaluation:
        """What an evaluation of ``cid`` on ``split`` returns, bound to its candidate."""
        c = self.state.candidates[cid]
        assert c.commit is not None and c.tree is not None, f"{cid} is not committed"
        return FinishedEvaluation(
            candidate=cid,
            commit=c.commit,
            tree=c.tree,
            parent_commit=c.parent_commit,
            split=split,
            attempt=attempt,
            rewards=rewards,
            errors={},
            trajectories={t: "0" * 64 for t in rewards},
            model=None,
            started_at=1.0,
            finished_at=2.0,
        )

    def certify(
        self,
        done: FinishedEvaluation,
        *,
        binding: Binding | None = None,
        signer: Signer | None = None,
    ) -> Event:
        """``evaluation_certified`` as the engine signs it (or as a forger would, with
        another ``binding`` or ``signer``)."""
        return self.emit(certify(done, binding or self.binding, signer or self.signer))

    def evaluate(self, cid: str, split: str, rewards: dict[str, float]) -> None:
        """One attempt on ``split``, started and certified."""
        attempt = self.start_evaluation(cid, split, len(rewards))
        self.certify(self.finished(cid, split, attempt, rewards))

    def review(self, cid: str, admit: bool = True) -> None:
        self.emit(E.CandidateGated(id=cid, admit=admit, reason="unit"))
        self.emit(E.CandidateRecorded(id=cid, notes={}))

    def seed(self, gate: float = 0.0, commit: str | None = None, tree: str | None = None) -> None:
        """``run_started`` and a seed evaluated on train, gate and sealed, admitted (its
        commit and tree made up unless given: a real repository's, for a transaction)."""
        self.start(commit, tree)
        self.propose(SEED, None, 0)
        self.mutate(SEED, commit, tree)
        for split in ("train", "gate", "sealed"):
            self.evaluate(SEED, split, {f"{split}1": gate})
        self.review(SEED)

    def child(
        self,
        cid: str,
        parent: str = SEED,
        generation: int = 1,
        *,
        gate: float | None = 0.5,
        admit: bool | None = True,
    ) -> None:
        """A child proposed and committed; evaluated on train and gate unless ``gate`` is
        None; gated and recorded unless ``admit`` is None."""
        self.propose(cid, parent, generation)
        self.mutate(cid)
        if gate is None:
            return
        self.evaluate(cid, "train", {"train1": gate})
        self.evaluate(cid, "gate", {"gate1": gate})
        if admit is not None:
            self.review(cid, admit)

    def generation(self, n: int) -> None:
        self.emit(E.GenerationStarted(generation=n))


def rebound(binding: Binding, **changes: str) -> Binding:
    """``binding`` with some of its fields changed (a record bound elsewhere)."""
    return replace(binding, **changes)
