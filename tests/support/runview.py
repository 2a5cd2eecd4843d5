"""A hand-made RunView and contexts for the built-in operators (the same API a user's
operator gets)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from rsiframe.api import (
    CandidateView,
    InformationFlowError,
    MutateContext,
    Rollout,
    RolloutContext,
)


def cand(
    cid: str,
    parent: str | None = None,
    state: str = "admitted",
    tree: str | None = None,
    description: str = "",
) -> CandidateView:
    return CandidateView(
        id=cid,
        parent=parent,
        generation=0 if parent is None else 1,
        state=state,
        commit="c" * 40,
        tree=tree or cid,
        description=description,
    )


class FakeRun:
    def __init__(
        self,
        cands: list[CandidateView],
        gate: dict[str, float],
        train: dict[str, float] | None = None,
        files: dict[str, bytes] | None = None,
        trajectories: dict[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        self._c = {c.id: c for c in cands}
        self._gate = gate
        self._train = train or {}
        self._files = files or {}
        self._traj = trajectories or {}

    lessons = ""

    def candidates(self) -> list[CandidateView]:
        return list(self._c.values())

    def candidate(self, cid: str) -> CandidateView:
        return self._c[cid]

    def admitted(self) -> list[CandidateView]:
        return [c for c in self._c.values() if c.state == "admitted"]

    def lineage(self, cid: str) -> list[CandidateView]:
        return [self._c[cid]]

    def score(self, cid: str, split: str) -> float | None:
        if split == "sealed":
            raise InformationFlowError("sealed")
        return (self._gate if split == "gate" else self._train).get(cid)

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        return None

    def trajectories(self, cid: str) -> list[dict[str, Any]]:
        return self._traj.get(cid, [])

    def artifact(self, digest: str) -> bytes:
        raise KeyError(digest)

    def read_file(self, cid: str, path: str) -> bytes:
        return self._files[path]

    def trees(self) -> set[str]:
        return {c.tree for c in self._c.values() if c.tree}


POP = [
    cand("c0"),
    cand("c1", "c0"),
    cand("c2", "c0"),
    cand("c3", "c0", state="declined"),
    cand("c4", "c1"),
]


SCORES = {"c0": 0.2, "c1": 0.6, "c2": 0.6, "c3": 0.9, "c4": 0.4}


TRAJ = [
    {
        "task": "a",
        "reward": 1.0,
        "error": None,
        "trajectory": "sha256:1",
        "agent": {"stdout_tail": "solved", "stderr_tail": ""},
    },
    {
        "task": "b",
        "reward": 0.0,
        "error": None,
        "trajectory": "sha256:2",
        "agent": {"stdout_tail": "x\ngave up after 300 decisions", "stderr_tail": ""},
    },
    {
        "task": "c",
        "reward": 0.0,
        "error": "agent timed out after 5s",
        "trajectory": "sha256:3",
        "agent": {"stdout_tail": "", "stderr_tail": ""},
    },
    {
        "task": "d",
        "reward": 0.0,
        "error": None,
        "trajectory": "sha256:4",
        "agent": {"stdout_tail": "gave up after 300 decisions", "stderr_tail": ""},
    },
]


def rctx(run: FakeRun, calls: list[list[str] | None]) -> RolloutContext:
    def run_train(ids: list[str] | None) -> list[dict[str, Any]]:
        calls.append(ids)
        return [{"task": t, "reward": 0.0, "error": None, "trajectory": ""} for t in ids or []]

    return RolloutContext(run, random.Random(0), 1, cand("p"), run_train, ["a", "b", "c", "d"])


def mctx(
    workdir: Path,
    seed: int,
    run: FakeRun | None = None,
    include: tuple[str, ...] = ("*",),
    exclude: tuple[str, ...] = (),
) -> MutateContext:
    return MutateContext(
        run or FakeRun([cand("c0")], {}),
        random.Random(seed),
        1,
        "c9",
        cand("c0"),
        workdir,
        Rollout(trajectories=[]),
        None,
        "",
        include,
        exclude,
    )
