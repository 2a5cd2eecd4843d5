"""The minibatch validate operator (GEPA): a child must beat its parent's certified train
rewards on a seeded minibatch of train tasks, run through the framework's ``run_train``."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from rsiframe.api import Check, ValidateContext
from rsiframe.operators.minibatch import Minibatch, MinibatchConfig, merge_subsample
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.slots.runview import StateView, as_view
from tests.support.gepaview import View, cand
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


# -- GEPA's merge acceptance (issue 31, the audit's T-G4) ------------------------------


def test_merge_acceptance_runs_where_the_parents_differ_and_needs_the_better_sum() -> None:
    first = {"t1": 1.0, "t2": 0.0, "t3": 1.0, "t4": 1.0, "t5": 0.0, "t6": 1.0}
    second = {"t1": 0.0, "t2": 1.0, "t3": 1.0, "t4": 0.0, "t5": 1.0, "t6": 1.0}
    ids = merge_subsample(first, second, 5, random.Random(0))
    differ = {t for t in first if first[t] != second[t]}
    assert len(ids) == 5 and len(set(ids) & differ) == 4  # every differing task, then a tie
    run = View([cand("c1"), cand("c2")], {"c1": first, "c2": second})
    seen: list[list[str]] = []

    def runner(solved: set[str]) -> Any:
        def run_train(task_ids: list[str]) -> list[dict[str, Any]]:
            seen.append(task_ids)
            return [{"task": t, "reward": float(t in solved)} for t in task_ids]

        return run_train

    def check(solved: set[str]) -> Any:
        ctx = ValidateContext(
            run,
            random.Random(0),
            2,
            "c9",
            cand("c1"),
            Path("."),
            [],  # type: ignore[arg-type]
            runner(solved),
            sorted(first),
            None,
            cand("c2"),
        )
        return Minibatch(MinibatchConfig(merge_tasks=5)).validate(ctx)

    sums = (sum(first[t] for t in ids), sum(second[t] for t in ids))
    as_first = {t for t in ids if first[t] == 1.0}
    assert check(set(first) | set(second)).ok  # every task: above both parents
    assert check(as_first).ok == (len(as_first) >= max(sums))  # the better sum is enough
    assert not check(set(sorted(as_first)[:1])).ok  # one task: below the better parent
    assert all(s == ids for s in seen)  # always the tasks where the parents differ first
