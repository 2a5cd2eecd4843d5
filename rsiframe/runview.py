"""The read-only :class:`~rsiframe.api.RunView` operators get: no writes, no sealed results.

What a slot may read is the table :data:`rsiframe.api.INFORMATION` (plus
per-task gate rewards when the recipe sets ``information.gate_detail``). The
engine runs each operator call inside :meth:`StateView.calling`, which
attributes reads to its slot, operator and candidate; every read is checked against the table,
and a read beyond it raises :class:`~rsiframe.api.InformationFlowError` after
reporting the attempt to ``on_violation`` (the engine appends a signed
``information_flow_violation`` event), so an operator that swallows the error
is still on record.
"""

from __future__ import annotations

import bisect
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rsiframe.api import CandidateView, InformationFlowError, may_read
from rsiframe.archive import get_artifact
from rsiframe.candidates import CandidateRepo
from rsiframe.state import Candidate, RunState

Violation = dict[str, Any]


def as_view(c: Candidate) -> CandidateView:
    return CandidateView(
        id=c.id,
        parent=c.parent,
        generation=c.generation,
        state=c.state,
        commit=c.commit,
        tree=c.tree,
        description=c.description,
        placement=c.placement,
    )


class StateView:
    """A window onto :class:`RunState` that enforces what operators may see."""

    def __init__(
        self,
        state: RunState,
        repo: CandidateRepo,
        run_dir: Path,
        *,
        gate_detail: bool = False,
        on_violation: Callable[[Violation], None] | None = None,
    ) -> None:
        self._state = state
        self._repo = repo
        self._run_dir = run_dir
        self.gate_detail = gate_detail
        self._on_violation = on_violation
        # who is reading: set for the length of one operator call by :meth:`calling`
        self.slot: str | None = None
        self.operator: str | None = None
        self.candidate_id: str | None = None
        self.grants: frozenset[str] = frozenset()
        self._visible: tuple[tuple[int, int, int], set[str]] | None = None
        #: views of admitted candidates: nothing an operator sees of them changes any more
        self._final_views: dict[str, CandidateView] = {}
        # the gate ranking as returned by :meth:`ranked`, and how many admissions it holds
        self._ranked: list[tuple[float, CandidateView]] = []
        self._ranked_keys: list[tuple[float, int]] = []
        self._ranked_seen = 0

    @contextlib.contextmanager
    def calling(
        self, slot: str, operator: str, candidate: str, grants: frozenset[str] = frozenset()
    ) -> Iterator[StateView]:
        """Attribute reads during one operator call to its slot, operator and candidate.

        ``grants`` are the operator's declared extra reads (``Operator.grants``).
        """
        saved = (self.slot, self.operator, self.candidate_id, self.grants)
        self.slot, self.operator, self.candidate_id = slot, operator, candidate
        self.grants = grants
        try:
            yield self
        finally:
            self.slot, self.operator, self.candidate_id, self.grants = saved

    # -- enforcement ----------------------------------------------------------------

    def may(self, what: str) -> bool:
        return may_read(self.slot, what, gate_detail=self.gate_detail, grants=self.grants)

    def record_violation(self, what: str, detail: str) -> None:
        """Report an attempt to read ``what`` beyond this slot's view."""
        if self._on_violation is not None:
            self._on_violation(
                {
                    "slot": self.slot,
                    "operator": self.operator,
                    "candidate": self.candidate_id,
                    "asked": what,
                    "detail": detail,
                }
            )

    def _deny(self, what: str, detail: str) -> InformationFlowError:
        self.record_violation(what, detail)
        who = f"the {self.slot} operator" if self.slot else "operators"
        return InformationFlowError(f"{who} may not read {detail}")

    def _check(self, what: str, detail: str) -> None:
        if not self.may(what):
            raise self._deny(what, detail)

    def _get(self, cid: str) -> Candidate:
        try:
            return self._state.candidates[cid]
        except KeyError:
            raise KeyError(f"no candidate {cid!r}") from None

    # -- the RunView protocol -------------------------------------------------------

    @property
    def lessons(self) -> str:
        digest = self._state.lessons_digest
        return get_artifact(self._run_dir, digest).decode() if digest else ""

    def candidates(self) -> list[CandidateView]:
        return [as_view(c) for c in self._state.candidates.values()]

    def candidate(self, cid: str) -> CandidateView:
        return as_view(self._get(cid))

    def admitted(self) -> list[CandidateView]:
        return [self._final_view(c) for c in self._state.admitted()]

    def ranked(self, split: str = "gate") -> list[tuple[float, CandidateView]]:
        """Admitted candidates with a ``split`` score, best first (older first on ties).

        For ``gate`` the ranking grows by one insertion per admission, not a sort per call.
        """
        self._check(f"scores:{split}", f"{split} scores")
        st = self._state
        if split != "gate":
            rows = [(c.score(split), c.index, c) for c in st.admitted()]
            keyed = sorted((-s, i, c.id) for s, i, c in rows if s is not None)
            return [(-neg, self._final_view(self._get(cid))) for neg, _, cid in keyed]
        for cid in st.admission_log[self._ranked_seen :]:
            c = self._get(cid)
            score = c.score("gate")
            if score is not None:
                at = bisect.bisect(self._ranked_keys, (-score, c.index))
                self._ranked_keys.insert(at, (-score, c.index))
                self._ranked.insert(at, (score, self._final_view(c)))
        self._ranked_seen = len(st.admission_log)
        return list(self._ranked)

    def _final_view(self, c: Candidate) -> CandidateView:
        view = self._final_views.get(c.id)
        if view is None:
            view = self._final_views[c.id] = as_view(c)
        return view

    def lineage(self, cid: str) -> list[CandidateView]:
        out = []
        c: Candidate | None = self._get(cid)
        while c is not None:
            out.append(as_view(c))
            c = self._state.candidates.get(c.parent) if c.parent else None
        return out

    def score(self, cid: str, split: str) -> float | None:
        self._check(f"scores:{split}", f"{split} scores (of {cid})")
        return self._get(cid).score(split)

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        detail = f"per-task {split} rewards (of {cid})"
        if split == "gate" and not self.may("rewards:gate"):
            detail += "; the recipe's information.gate_detail opens them"
        self._check(f"rewards:{split}", detail)
        rec = self._get(cid).record(split)
        return dict(rec.predicate.rewards) if rec else None

    def trajectories(self, cid: str, split: str = "train") -> list[dict[str, Any]]:
        self._check(f"trajectories:{split}", f"{split} trajectories (of {cid})")
        rec = self._get(cid).record(split)
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
        self._check("artifacts", "artifacts")
        if digest not in self._visible_artifacts():
            raise self._deny(
                "artifact", f"artifact {digest[:16]}… (not train evidence, a rollout or lessons)"
            )
        return get_artifact(self._run_dir, digest)

    def read_file(self, cid: str, path: str) -> bytes:
        c = self._get(cid)
        if c.commit is None:
            raise KeyError(f"candidate {cid} has no commit")
        return self._repo.read(c.commit, path)

    def trees(self) -> set[str]:
        return set(self._state.tree_count)

    # -- helpers --------------------------------------------------------------------

    def _visible_artifacts(self) -> set[str]:
        """Digests reachable from what operators see: train evidence, rollouts, lessons."""
        st = self._state
        key = (st.records, len(st.candidates), len(st.reflected))
        if self._visible is not None and self._visible[0] == key:
            # a new rollout or analysis does not change the counts: those are checked directly
            extra = {d for c in st.candidates.values() for d in (c.rollout, c.analysis) if d}
            return self._visible[1] | extra
        out: set[str] = set(self._state.reflected.values())
        for c in self._state.candidates.values():
            out.update(d for d in (c.rollout, c.analysis) if d)
            rec = c.record("train")
            if rec is None:
                continue
            for digest in rec.predicate.trajectories.values():
                out.add(digest)
                try:
                    traj = json.loads(get_artifact(self._run_dir, digest))
                except Exception:  # missing evidence is verify's business, not a read right
                    continue
                out.update(v for v in traj.get("artifacts", {}).values() if isinstance(v, str))
        self._visible = (key, out)
        return out
