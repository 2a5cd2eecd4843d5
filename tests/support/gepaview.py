"""A synthetic run view for GEPA's operators (pareto, merge gepa, minibatch): candidates
with train rewards, gate scores and file contents."""

from __future__ import annotations

from rsiframe.api import CandidateView


class View:
    """A run view of candidates with train rewards, gate scores and file contents."""

    lessons = ""

    def __init__(
        self,
        cands: list[CandidateView],
        train: dict[str, dict[str, float]] | None = None,
        files: dict[str, dict[str, str]] | None = None,
        gate: dict[str, float] | None = None,
    ) -> None:
        self._c = {c.id: c for c in cands}
        self._train = train or {}
        self._files = files or {}
        self._gate = gate or {}

    def candidates(self) -> list[CandidateView]:
        return list(self._c.values())

    def candidate(self, cid: str) -> CandidateView:
        return self._c[cid]

    def admitted(self) -> list[CandidateView]:
        return [c for c in self._c.values() if c.state == "admitted"]

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        return self._train.get(cid)

    def score(self, cid: str, split: str) -> float | None:
        if split == "gate":
            return self._gate.get(cid)
        r = self._train.get(cid)
        return sum(r.values()) / len(r) if r else None

    def read_file(self, cid: str, path: str) -> bytes:
        return self._files[cid][path].encode()


def cand(cid: str, *parents: str, state: str = "admitted") -> CandidateView:
    return CandidateView(
        cid, parents[0] if parents else None, 1, state, "c" * 40, cid, parents=tuple(parents)
    )
