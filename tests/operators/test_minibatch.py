"""The minibatch validate operator (GEPA): a child must beat its parent's certified train
rewards on a seeded minibatch of train tasks, run through the framework's ``run_train``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rsiframe.api import Check, ValidateContext
from rsiframe.operators.minibatch import Minibatch, MinibatchConfig
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.slots.runview import StateView, as_view
from tests.support.runlog import SEED, SignedRun

PARENT = {"t1": 1.0, "t2": 0.0, "t3": 0.0, "t4": 1.0}


def _validate(
    run: SignedRun, tmp_path: Path, child: dict[str, float], size: int = 2, ties: bool = False
) -> tuple[Check, list[list[str]]]:
    asked: list[list[str]] = []

    def run_train(ids: list[str]) -> list[dict]:
        asked.append(ids)
        return [{"task": t, "reward": child[t]} for t in ids]

    view = StateView(run.state, CandidateRepo.create(tmp_path / "repo.git"), run.archive.run_dir)
    parent = as_view(run.state.candidates[SEED])
    ctx = ValidateContext(
        view, random.Random(3), 1, "c0001", parent, tmp_path, [], run_train, sorted(PARENT)
    )
    return Minibatch(MinibatchConfig(size=size, ties=ties)).validate(ctx), asked


@pytest.fixture
def parent(signed_run: SignedRun) -> SignedRun:
    signed_run.start()
    signed_run.propose(SEED, None, 0)
    signed_run.mutate(SEED)
    signed_run.evaluate(SEED, "train", PARENT)
    signed_run.evaluate(SEED, "gate", {"g1": 0.0})
    signed_run.evaluate(SEED, "sealed", {"s1": 0.0})
    signed_run.review(SEED)
    return signed_run


def test_a_child_that_beats_its_parent_on_the_minibatch_passes(
    parent: SignedRun, tmp_path: Path
) -> None:
    check, asked = _validate(parent, tmp_path, {t: 1.0 for t in PARENT})
    (ids,) = asked
    assert len(ids) == 2 and set(ids) <= set(PARENT)
    assert check.ok and check.reason.startswith(f"minibatch {ids}: child 2 beats parent")
    again, _ = _validate(parent, tmp_path / "b", {t: 1.0 for t in PARENT})
    assert again.reason == check.reason  # the call's seeded RNG draws the same tasks


def test_a_tie_passes_only_when_asked(parent: SignedRun, tmp_path: Path) -> None:
    same = dict(PARENT)
    assert not _validate(parent, tmp_path, same, size=4)[0].ok
    tie, _ = _validate(parent, tmp_path / "b", same, size=4, ties=True)
    assert tie.ok and "child 2 ties parent 2" in tie.reason
    loses, _ = _validate(parent, tmp_path / "c", {t: 0.0 for t in PARENT}, size=4)
    assert not loses.ok and "loses to" in loses.reason


def test_it_declares_the_most_task_runs_one_call_may_use() -> None:
    assert Minibatch(MinibatchConfig(size=8)).max_task_runs(train=5) == 5
    assert Minibatch(MinibatchConfig(size=3)).max_task_runs(train=24) == 3
