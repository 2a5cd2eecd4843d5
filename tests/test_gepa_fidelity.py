"""GEPA as published (issue 31; the audit's T-G1, T-G3, T-G4, T-G5): its dominance removal,
its merge rules and schedule, its acceptance of a merge, and the gepa recipe's pool
admission, on synthetic run views. T-G2 (the reflection and its minibatch through the real
engine and gateway) is in ``test_gepa_reflect.py``; the recipe end to end on pyfix in
``test_faithful_methods_e2e.py``."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

from rsiframe.api import CandidateView, GateContext, MergeContext, SelectContext, ValidateContext
from rsiframe.operators.gepa import Pareto, ParetoConfig, instance_front
from rsiframe.operators.merge import GepaMerge, GepaMergeConfig, merges_due
from rsiframe.operators.minibatch import Minibatch, MinibatchConfig, merge_subsample
from rsiframe.recipe.load import load as load_recipe

Matrix = dict[str, dict[str, float]]


# -- T-G3: GEPA's dominance removal ----------------------------------------------------


def gepa_restated(matrix: Matrix) -> dict[str, int]:
    """GEPA's ``remove_dominated_programs`` and front frequencies, restated literally: a
    program is dominated when every front it is on holds one of the programs not yet
    removed; the lowest aggregate is tried first, and the scan restarts after a removal."""
    tasks = sorted({t for r in matrix.values() for t in r})
    fronts = {}
    for t in tasks:
        best = max(r.get(t, 0.0) for r in matrix.values())
        fronts[t] = {c for c, r in matrix.items() if r.get(t, 0.0) == best}
    agg = {c: sum(r.values()) / len(r) for c, r in matrix.items()}
    programs = sorted({p for f in fronts.values() for p in f}, key=lambda p: (agg[p], p))
    dominated: set[str] = set()
    found = True
    while found:
        found = False
        for y in programs:
            if y in dominated:
                continue
            rest = set(programs) - {y} - dominated
            if all(any(o in rest for o in f) for f in fronts.values() if y in f):
                dominated.add(y)
                found = True
                break
    kept = [p for p in programs if p not in dominated]
    return {p: sum(1 for f in fronts.values() if p in f) for p in kept}


def test_the_union_of_the_others_covers_a_member_appendix_a2() -> None:
    # A wins {t1, t2}, B {t2, t3}, C {t1, t3}; nobody solves t4. No member's wins are a
    # subset of another's (the rule before issue 31 kept all three), yet GEPA drops one:
    # each one's fronts are covered by the other two together.
    matrix = {
        "A": {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.0},
        "B": {"t1": 0.0, "t2": 1.0, "t3": 1.0, "t4": 0.0},
        "C": {"t1": 1.0, "t2": 0.0, "t3": 1.0, "t4": 0.0},
    }
    # equal aggregates are tried in id order: A goes (B and C cover it); t4's front holds all
    assert gepa_restated(matrix) == {"B": 3, "C": 3}
    assert instance_front(matrix) == {"B": 3, "C": 3}


def test_instance_front_is_gepas_dominance_removal_on_random_matrices() -> None:
    rng = random.Random(31)
    for _ in range(400):
        n, m = rng.randint(1, 7), rng.randint(1, 6)
        matrix = {
            f"c{i}": {f"t{j}": float(rng.choice([0, 0, 0.5, 1])) for j in range(m)}
            for i in range(n)
        }
        assert instance_front(matrix) == gepa_restated(matrix), matrix


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


def test_a_specialist_is_kept_and_drawn_in_proportion_to_its_fronts() -> None:
    # T-G5: c2 solves only t4, which nobody else solves; its mean is the lowest
    train = {
        "c0": {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.0},
        "c1": {"t1": 1.0, "t2": 1.0, "t3": 1.0, "t4": 0.0},
        "c2": {"t1": 0.0, "t2": 0.0, "t3": 0.0, "t4": 1.0},
    }
    run = View([cand("c0"), cand("c1", "c0"), cand("c2", "c0")], train)
    assert instance_front(train) == {"c1": 3, "c2": 1}  # c0 is covered by c1
    op = Pareto(ParetoConfig())
    n = 4000
    picks = Counter(op.select(SelectContext(run, random.Random(s), 1)).parent for s in range(n))  # type: ignore[arg-type]
    assert set(picks) == {"c1", "c2"}
    assert abs(picks["c2"] / n - 1 / 4) < 0.03


# -- T-G1: the recipe admits every minibatch-accepted child -----------------------------


def test_the_gepa_recipe_admits_a_child_below_its_parent_on_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_API_KEY", "k")
    r = load_recipe(REPO / "recipes" / "methods" / "gepa.yaml")
    cls, config = r.operators["gate"]
    run = View([cand("c0"), cand("c1", "c0", state="certified")], gate={"c0": 0.9, "c1": 0.1})
    ctx = GateContext(run, random.Random(0), 1, cand("c1", "c0"), cand("c0"))  # type: ignore[arg-type]
    assert cls(config).gate(ctx).admit
    # one proposal at a time, accepted on the reflection's own minibatch, no lessons
    assert r.recipe.children_per_generation == 1
    assert r.data["slots"]["validate"]["config"]["tasks"] == "rollout"
    assert r.data["slots"]["rollout"]["config"] == {"max_tasks": 3, "reuse_certified": False}
    assert "reflect" not in r.data["slots"] and "merge" not in r.data["slots"]


# -- T-G4: GEPA's merge ------------------------------------------------------------------


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
