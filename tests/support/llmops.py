"""Model-driven operators against the scripted stub: a parent, a rollout, mutation
contexts, and the ``models`` fixture's holder (tests/operators/conftest.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from rsiframe.api import CandidateView, MutateContext, Rollout
from rsiframe.gateway.app import Gateway
from rsiframe.gateway.stub import Answer, StubLLM

PARENT = CandidateView("c0", None, 0, "admitted", "abc", "def", "seed")


ROLLOUT = Rollout(
    trajectories=[
        {"task": "t1", "reward": 0.0, "error": None, "stdout_tail": "AssertionError in mean"},
        {"task": "t2", "reward": 1.0, "stdout_tail": "ok"},
    ]
)


@dataclass
class Models:
    stub: StubLLM
    gw: Gateway

    def prompts(self) -> list[str]:
        return [r["messages"][-1]["content"] for r in self.stub.requests]


def scripted(*answers: Answer) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("models", [answers], indirect=True)


def mctx(work: Path, include: tuple[str, ...] = ("*.py", "*.md")) -> MutateContext:
    return MutateContext(
        run=None,  # type: ignore[arg-type]  # mutate operators here read no run state
        rng=random.Random(0),
        generation=1,
        candidate_id="c1",
        parent=PARENT,
        workdir=work,
        rollout=ROLLOUT,
        analysis=None,
        lessons="keep prompts short",
        surface_include=include,
        surface_exclude=(),
    )


def work_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    return work
