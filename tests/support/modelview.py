"""A synthetic run view for the model-driven methods' policies (AHE, A-Evolve, llmprompt)."""

from __future__ import annotations

import json
import random
from typing import Any

from rsiframe.api import (
    CandidateView,
    SelectContext,
)


def cand(
    cid: str, parent: str | None, gen: int, analysis: str | None = None, state: str = "admitted"
) -> CandidateView:
    return CandidateView(cid, parent, gen, state, "c" * 40, cid, f"change {cid}", {}, (), analysis)


class Run:
    """A RunView over candidates, train rewards, gate scores and analysis artifacts."""

    lessons = ""

    def __init__(
        self,
        cands: list[CandidateView],
        train: dict[str, dict[str, float]] | None = None,
        gate: dict[str, float] | None = None,
        manifests: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self._c = {c.id: c for c in cands}
        self._train = train or {}
        self._gate = gate or {}
        self._blobs = {
            d: json.dumps({"summary": "s", "details": {"manifest": m}}).encode()
            for d, m in (manifests or {}).items()
        }

    def candidates(self) -> list[CandidateView]:
        return list(self._c.values())

    def admitted(self) -> list[CandidateView]:
        return [c for c in self._c.values() if c.state == "admitted"]

    def score(self, cid: str, split: str) -> float | None:
        if split == "gate":
            return self._gate.get(cid)
        r = self._train.get(cid)
        return sum(r.values()) / len(r) if r else None

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        assert split == "train"
        return self._train.get(cid)

    def artifact(self, digest: str) -> bytes:
        return self._blobs[digest]

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected read: {name}")


def sctx(run: Run) -> SelectContext:
    return SelectContext(run=run, rng=random.Random(0), generation=3)  # type: ignore[arg-type]
