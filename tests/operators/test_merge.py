"""The three_way merge operator: a partner outside the selected parent's lineage, best train
score first, and which side wins a conflict. A real RunView over hand-written signed events
(tests/support/runlog.py)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from rsiframe.api import MergeContext, MergePlan
from rsiframe.operators.merge import (
    GepaMerge,
    GepaMergeConfig,
    ThreeWay,
    ThreeWayConfig,
    merges_due,
    partners,
)
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.slots.runview import StateView, as_view
from tests.support.gepaview import View, cand
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


# -- GEPA's merge (issue 31, the audit's T-G4) -------------------------------------------


def merge_world(**over: Any) -> View:
    """c0 the seed; c1 changed prompt.md, c2 changed agent.py (both from c0, both accepted):
    the front is {c1, c2}, each best on a task of its own."""
    files = {
        "c0": {"prompt.md": "p0", "agent.py": "a0"},
        "c1": {"prompt.md": "p1", "agent.py": "a0"},
        "c2": {"prompt.md": "p0", "agent.py": "a2"},
    }
    train = {
        "c0": {"t1": 0.0, "t2": 0.0, "t3": 1.0},
        "c1": {"t1": 1.0, "t2": 0.0, "t3": 1.0},
        "c2": {"t1": 0.0, "t2": 1.0, "t3": 1.0},
    }
    cands = [cand("c0"), cand("c1", "c0"), cand("c2", "c0")]
    return View(over.get("cands", cands), over.get("train", train), over.get("files", files))


def plan(run: View, first: str, seed: int = 0, max_merges: int = 5) -> Any:
    op = GepaMerge(GepaMergeConfig(components=["prompt.md", "agent.py"], max_merges=max_merges))
    ctx = MergeContext(run, random.Random(seed), 2, "c9", run.candidate(first))  # type: ignore[arg-type]
    return op.merge(ctx)


def test_merge_pairs_two_front_members_over_an_ancestor_no_better_than_either() -> None:
    p = plan(merge_world(), "c1")
    assert (p.partner, p.base, p.granularity) == ("c2", "c0", "file")


def test_a_pair_that_changed_only_the_same_component_is_not_merged() -> None:
    run = merge_world()
    run._files["c2"] = {"prompt.md": "p2", "agent.py": "a0"}  # both changed prompt.md only
    assert plan(run, "c1").partner is None


def test_no_merge_over_an_ancestor_better_than_a_side() -> None:
    run = merge_world()
    run._train["c0"] = {"t1": 1.0, "t2": 1.0, "t3": 1.0}  # the ancestor beats both...
    run._train["c1"]["t4"] = run._train["c2"]["t5"] = 1.0  # ...which stay on the front
    assert plan(run, "c1").partner is None


def test_merges_are_scheduled_only_after_an_accepted_mutation_and_at_most_max_merges() -> None:
    world = merge_world()
    # before any accepted proposal: nothing due
    assert not merges_due(View([cand("c0")]), 5)[0]
    # the last proposal was rejected: no merge now, though one is due
    rejected = [*world.candidates(), cand("c3", "c1", state="rejected")]
    assert not merges_due(View(rejected), 5)[0]
    assert plan(merge_world(cands=rejected), "c1").partner is None
    # right after an accepted mutation: due
    assert merges_due(world, 5) == (True, "2 merge(s) due")
    # an accepted merge uses one up; max_merges accepted: none any more
    merged = [*world.candidates(), cand("c3", "c1", "c2"), cand("c4", "c3")]
    assert merges_due(View(merged), 5) == (True, "2 merge(s) due")
    assert merges_due(View(merged), 1) == (False, "1 merges accepted (max_merges 1)")
    # a pair already merged is not merged again
    assert plan(merge_world(cands=[*world.candidates(), cand("c5", "c1")]), "c1").partner == "c2"
    again = [*world.candidates(), cand("c3", "c1", "c2", state="rejected"), cand("c5", "c1")]
    assert plan(merge_world(cands=again), "c1").partner is None
