"""The read-only :class:`~rsiframe.api.RunView` operators get: no writes, no sealed results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rsiframe.api import CandidateView, InformationFlowError
from rsiframe.archive import get_artifact
from rsiframe.candidates import CandidateRepo
from rsiframe.state import Candidate, RunState

OPERATOR_SPLITS = ("train", "gate")


def as_view(c: Candidate) -> CandidateView:
    return CandidateView(
        id=c.id,
        parent=c.parent,
        generation=c.generation,
        state=c.state,
        commit=c.commit,
        tree=c.tree,
        description=c.description,
    )


class StateView:
    """A window onto :class:`RunState` that enforces what operators may see."""

    def __init__(self, state: RunState, repo: CandidateRepo, run_dir: Path) -> None:
        self._state = state
        self._repo = repo
        self._run_dir = run_dir

    def _get(self, cid: str) -> Candidate:
        try:
            return self._state.candidates[cid]
        except KeyError:
            raise KeyError(f"no candidate {cid!r}") from None

    @property
    def lessons(self) -> str:
        digest = self._state.lessons_digest
        return get_artifact(self._run_dir, digest).decode() if digest else ""

    def candidates(self) -> list[CandidateView]:
        return [as_view(c) for c in self._state.candidates.values()]

    def candidate(self, cid: str) -> CandidateView:
        return as_view(self._get(cid))

    def admitted(self) -> list[CandidateView]:
        return [as_view(c) for c in self._state.admitted()]

    def lineage(self, cid: str) -> list[CandidateView]:
        out = []
        c: Candidate | None = self._get(cid)
        while c is not None:
            out.append(as_view(c))
            c = self._state.candidates.get(c.parent) if c.parent else None
        return out

    def score(self, cid: str, split: str) -> float | None:
        if split not in OPERATOR_SPLITS:
            raise InformationFlowError(f"operators may not read {split} scores")
        return self._get(cid).score(split)

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        if split != "train":
            raise InformationFlowError(f"operators may not read per-task {split} rewards")
        rec = self._get(cid).record("train")
        return dict(rec.predicate.rewards) if rec else None

    def trajectories(self, cid: str) -> list[dict[str, Any]]:
        rec = self._get(cid).record("train")
        if rec is None:
            return []
        out = []
        for task, digest in sorted(rec.predicate.trajectories.items()):
            traj = json.loads(get_artifact(self._run_dir, digest))
            traj["task"] = task
            traj["trajectory"] = digest
            out.append(traj)
        return out

    def artifact(self, digest: str) -> bytes:
        return get_artifact(self._run_dir, digest)

    def read_file(self, cid: str, path: str) -> bytes:
        c = self._get(cid)
        if c.commit is None:
            raise KeyError(f"candidate {cid} has no commit")
        return self._repo.read(c.commit, path)

    def trees(self) -> set[str]:
        return {
            c.tree
            for c in self._state.candidates.values()
            if c.tree is not None and c.rejected is None
        }
