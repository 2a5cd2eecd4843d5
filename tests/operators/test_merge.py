"""The three_way merge operator: a partner outside the selected parent's lineage, best train
score first, and which side wins a conflict. A real RunView over hand-written signed events
(tests/support/runlog.py)."""

from __future__ import annotations

import random
from pathlib import Path

from rsiframe.api import MergeContext, MergePlan
from rsiframe.operators.merge import ThreeWay, ThreeWayConfig, partners
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.slots.runview import StateView, as_view
from tests.support.runlog import SEED, SignedRun


def _view(run: SignedRun, tmp_path: Path) -> StateView:
    return StateView(run.state, CandidateRepo.create(tmp_path / "repo.git"), run.archive.run_dir)


def _family(run: SignedRun) -> None:
    """seed -> c0001 (train 0.5) -> c0003 (0.9); seed -> c0002 (0.7); c0004 declined."""
    run.seed()
    run.child("c0001", gate=0.5)
    run.child("c0002", gate=0.7)
    run.child("c0003", parent="c0001", generation=2, gate=0.9)
    run.child("c0004", gate=1.0, admit=False)


def _plan(run: SignedRun, tmp_path: Path, first: str, **config: object) -> MergePlan:
    op = ThreeWay(ThreeWayConfig.model_validate(config))
    first_view = as_view(run.state.candidates[first])
    return op.merge(MergeContext(_view(run, tmp_path), random.Random(0), 3, "c0009", first_view))


def test_partners_are_admitted_and_outside_the_lineage_best_first(
    signed_run: SignedRun, tmp_path: Path
) -> None:
    _family(signed_run)
    view = _view(signed_run, tmp_path)
    assert [c.id for c in partners(view, "c0003")] == ["c0002"]  # seed, c0001: ancestors
    assert [c.id for c in partners(view, "c0002")] == ["c0003", "c0001"]
    assert partners(view, SEED) == []  # everyone descends from the seed


def test_the_plan_names_the_partner_and_the_better_side(
    signed_run: SignedRun, tmp_path: Path
) -> None:
    _family(signed_run)
    plan = _plan(signed_run, tmp_path, "c0002", files={"prompts/*": "second", "x": "better"})
    assert (plan.partner, plan.prefer) == ("c0003", "second")  # 0.9 beats 0.7
    assert plan.files == {"prompts/*": "second", "x": "second"}
    assert _plan(signed_run, tmp_path / "b", "c0003", prefer="first").prefer == "first"


def test_without_a_partner_the_proposal_stays_a_mutation(
    signed_run: SignedRun, tmp_path: Path
) -> None:
    signed_run.seed()
    signed_run.child("c0001")
    plan = _plan(signed_run, tmp_path, "c0001")
    assert plan.partner is None and "no admitted candidate outside its lineage" in plan.reason
