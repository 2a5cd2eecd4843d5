"""A synthetic run view for the method policy operators (DGM, GEPA, islands, paired_test)."""

from __future__ import annotations

from typing import Any

from rsiframe.api import CandidateView, InformationFlowError


def view(cid: str, parent: str | None = None, state: str = "admitted") -> CandidateView:
    return CandidateView(cid, parent, 0 if parent is None else 1, state, "c" * 40, cid)


class Run:
    """A RunView over given candidates, gate scores and per-task rewards."""

    lessons = ""

    def __init__(
        self,
        cands: list[CandidateView],
        gate: dict[str, float],
        train_rewards: dict[str, dict[str, float]] | None = None,
        gate_rewards: dict[str, dict[str, float]] | None = None,
        gate_detail_open: bool = False,
    ) -> None:
        self._c = {c.id: c for c in cands}
        self._gate = gate
        self._train = train_rewards or {}
        self._gate_rewards = gate_rewards or {}
        self._open = gate_detail_open

    def candidates(self) -> list[CandidateView]:
        return list(self._c.values())

    def admitted(self) -> list[CandidateView]:
        return [c for c in self._c.values() if c.state == "admitted"]

    def score(self, cid: str, split: str) -> float | None:
        if split == "sealed":
            raise InformationFlowError("sealed")
        return self._gate.get(cid)

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        if split == "train":
            return self._train.get(cid)
        if split == "gate" and self._open:
            return self._gate_rewards.get(cid)
        raise InformationFlowError(split)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected read: {name}")
