"""The read-only :class:`~rsiframe.api.RunView` operators get: no writes, no sealed results.

What a slot may read is the table :data:`rsiframe.api.INFORMATION` (plus
per-task gate rewards when the recipe sets ``information.gate_detail``). The
engine runs each operator call inside :meth:`StateView.calling`, which
attributes reads to its slot, operator and candidate; every read is checked against the table,
and a read beyond it raises :class:`~rsiframe.api.InformationFlowError` after
reporting the attempt to ``on_violation`` (the engine appends a signed
``information_flow_violation`` event), so an operator that swallows the error
is still on record.

Operator calls may run on several worker threads at once (candidates in flight): who
is reading is per thread, and every read copies what it needs from the state under
:attr:`StateView.lock`, the lock the writer holds while it folds an event (never
during operator work). A call made with a horizon (``before``: a generation) sees
only candidates of earlier generations and the lessons as of that generation's start.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence, Set
from pathlib import Path
from typing import Any, TypeVar

from rsiframe.api import CandidateView, InformationFlowError, may_read
from rsiframe.archive.log import get_artifact
from rsiframe.archive.state import Candidate, RunState
from rsiframe.repo.candidates import CandidateRepo

Violation = dict[str, Any]

_T = TypeVar("_T")


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
        parents=tuple(c.parents),
        analysis=c.analysis,
        stopped_at=c.stopped_at,
        mutation=c.mutation,
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
        #: held by the writer while it folds an event, and by every read here while it copies
        self.lock = threading.RLock()
        # who is reading (per thread): set for the length of one operator call by :meth:`calling`
        self._who = threading.local()
        self._visible: dict[int | None, tuple[tuple[int, ...], set[str]]] = {}

    def _attr(self, name: str, default: Any = None) -> Any:
        return getattr(self._who, name, default)

    @property
    def slot(self) -> str | None:
        return self._attr("slot")

    @property
    def operator(self) -> str | None:
        return self._attr("operator")

    @property
    def candidate_id(self) -> str | None:
        return self._attr("candidate_id")

    @property
    def grants(self) -> frozenset[str]:
        return self._attr("grants", frozenset())

    @property
    def before(self) -> int | None:
        """The horizon of this thread's call: only generations before it are visible."""
        return self._attr("before")

    @contextlib.contextmanager
    def calling(
        self,
        slot: str,
        operator: str,
        candidate: str,
        grants: frozenset[str] = frozenset(),
        before: int | None = None,
    ) -> Iterator[StateView]:
        """Attribute reads during one operator call (on this thread) to its slot, operator
        and candidate; ``before`` limits them to the state as generation ``before`` began.

        ``grants`` are the operator's declared extra reads (``Operator.grants``).
        """
        who = self._who
        saved = {k: getattr(who, k, None) for k in ("slot", "operator", "candidate_id")}
        saved_grants, saved_before = self.grants, self.before
        who.slot, who.operator, who.candidate_id = slot, operator, candidate
        who.grants, who.before = grants, before
        try:
            yield self
        finally:
            for k, v in saved.items():
                setattr(who, k, v)
            who.grants, who.before = saved_grants, saved_before

    def _seen(self, c: Candidate) -> bool:
        before = self.before
        return before is None or c.generation < before

    def _all(self) -> list[Candidate]:
        """The candidates this call may see, copied under the lock."""
        with self.lock:
            return [c for c in self._state.candidates.values() if self._seen(c)]

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
        with self.lock:
            c = self._state.candidates.get(cid)
        if c is None or not self._seen(c):
            raise KeyError(f"no candidate {cid!r}") from None
        return c

    # -- the RunView protocol -------------------------------------------------------

    @property
    def lessons(self) -> str:
        with self.lock:
            digest = self._state.lessons_digest
            if self.before is not None:
                gens = [g for g in self._state.reflected if g < self.before]
                digest = self._state.reflected[max(gens)] if gens else None
        return get_artifact(self._run_dir, digest).decode() if digest else ""

    def candidates(self) -> list[CandidateView]:
        return [as_view(c) for c in self._all()]

    def candidate(self, cid: str) -> CandidateView:
        return as_view(self._get(cid))

    def admitted(self) -> list[CandidateView]:
        st = self._state
        with self.lock:  # from the index (proposal order), not a scan of every candidate
            kept = [st.candidates[cid] for _, cid in st.admitted_ids]
        return [as_view(c) for c in kept if self._seen(c)]

    def ranked(self, split: str) -> Sequence[tuple[float, CandidateView]]:
        """Admitted candidates by verified ``split`` score, best first (older first on
        ties), as ``(score, view)``: read from the state's gate ranking, one insertion per
        admission, and turned into views only as the operator reads them."""
        self._check(f"scores:{split}", f"{split} scores (of the admitted candidates)")
        st, before = self._state, self.before
        if split != "gate":
            rows = [(s, c) for c in self.admitted() if (s := self.score(c.id, split)) is not None]
            rows.sort(key=lambda r: -r[0])  # stable: older first on ties
            return rows
        with self.lock:
            ranking = list(st.gate_ranking)
            if before is not None and st.admitted_generation >= before:
                ranking = [r for r in ranking if st.candidates[r[2]].generation < before]
        return _Ranked(ranking, st.candidates)

    def lineage(self, cid: str) -> list[CandidateView]:
        out = []
        c: Candidate | None = self._get(cid)
        while c is not None:
            out.append(as_view(c))
            c = self._get(c.parent) if c.parent else None
        return out

    def score(self, cid: str, split: str) -> float | None:
        self._check(f"scores:{split}", f"{split} scores (of {cid})")
        c = self._get(cid)
        with self.lock:
            return c.score(split)

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        detail = f"per-task {split} rewards (of {cid})"
        if split == "gate" and not self.may("rewards:gate"):
            detail += "; the recipe's information.gate_detail opens them"
        self._check(f"rewards:{split}", detail)
        c = self._get(cid)
        with self.lock:
            rec = c.record(split)
        return dict(rec.predicate.rewards) if rec else None

    def trajectories(self, cid: str, split: str = "train") -> list[dict[str, Any]]:
        self._check(f"trajectories:{split}", f"{split} trajectories (of {cid})")
        c = self._get(cid)
        with self.lock:
            rec = c.record(split)
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

    def trees(self) -> Set[str]:
        """Trees of candidates not rejected: a live set over the state's index, so a
        membership test (what novelty asks) costs one lookup, not a scan."""
        return _Trees(self._state, self.lock, self.before)

    # -- helpers --------------------------------------------------------------------

    def _visible_artifacts(self) -> set[str]:
        """Digests reachable from what operators see: train evidence, rollouts, lessons,
        mutation reports."""
        st, before = self._state, self.before
        with self.lock:
            # what changes the answer: a certified record, a candidate, lessons, a rollout
            # or an analysis; while none did, the cached set is the answer (no scan per read)
            key = (st.records, len(st.candidates), len(st.reflected), st.evidence_events)
            cached = self._visible.get(before)
            if cached is not None and cached[0] == key:
                return cached[1]
            reflected = [d for g, d in st.reflected.items() if before is None or g < before]
            seen = [c for c in st.candidates.values() if self._seen(c)]
            evidence = [(c.rollout, c.analysis, rec) for c in seen for rec in _train_records(c)]
            evidence += [(c.mutation, None, None) for c in seen if c.mutation]
        out: set[str] = set(reflected)
        for rollout, analysis, rec in evidence:
            out.update(d for d in (rollout, analysis) if d)
            if rec is None:
                continue
            for digest in rec.predicate.trajectories.values():
                out.add(digest)
                try:
                    traj = json.loads(get_artifact(self._run_dir, digest))
                except Exception:  # missing evidence is verify's business, not a read right
                    continue
                out.update(v for v in traj.get("artifacts", {}).values() if isinstance(v, str))
        self._visible[before] = (key, out)
        return out


def _train_records(c: Candidate) -> list[Any]:
    """A candidate's certified train records: the train split and its stages (``train@1``)."""
    names = [s for s in c.attempts if s == "train" or s.startswith("train@")]
    return [rec for s in names if (rec := c.record(s)) is not None] or [None]


class _Ranked(Sequence[tuple[float, CandidateView]]):
    """A ranking as ``(score, view)`` rows, each view made when it is read."""

    def __init__(self, rows: list[tuple[float, int, str]], cands: dict[str, Candidate]) -> None:
        self._rows, self._cands = rows, cands

    def __len__(self) -> int:
        return len(self._rows)

    def _row(self, r: tuple[float, int, str]) -> tuple[float, CandidateView]:
        return -r[0], as_view(self._cands[r[2]])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._row(r) for r in self._rows[i]]
        return self._row(self._rows[i])


class _Trees(Set[str]):
    """Trees of candidates not rejected (of earlier generations only, with a horizon)."""

    def __init__(self, state: RunState, lock: threading.RLock, before: int | None) -> None:
        self._state, self._lock, self._before = state, lock, before

    @classmethod
    def _from_iterable(cls, it: Iterable[_T]) -> set[_T]:
        return set(it)  # set operations (|, &, -) give a plain set

    def _visible(self, holders: dict[str, int]) -> bool:
        return self._before is None or any(g < self._before for g in holders.values())

    def __contains__(self, tree: object) -> bool:
        with self._lock:
            holders = self._state.tree_holders.get(tree) if isinstance(tree, str) else None
            return holders is not None and bool(holders) and self._visible(holders)

    def _list(self) -> list[str]:
        with self._lock:
            return [t for t, h in self._state.tree_holders.items() if self._visible(h)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._list())

    def __len__(self) -> int:
        return len(self._list())
