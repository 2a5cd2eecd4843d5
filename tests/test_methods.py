"""Method policy operators (DGM, GEPA, statistical acceptance) on synthetic run views."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rsiframe.api import CandidateView, GateContext, InformationFlowError, SelectContext, may_read
from rsiframe.errors import OperatorNotFound
from rsiframe.operators.acceptance import (
    PairedTest,
    PairedTestConfig,
    paired_bootstrap_p,
    sign_test_p,
)
from rsiframe.operators.dgm import (
    KeepAll,
    ScoreChildProp,
    ScoreChildPropConfig,
    children_counts,
    score_child_weights,
)
from rsiframe.operators.gepa import Pareto, ParetoConfig, dominates, instance_front, objective_front
from rsiframe.slots.registry import resolve


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


# -- score_child_prop -------------------------------------------------------------------


def test_score_child_prop_probabilities_match_the_formula() -> None:
    cands = [
        view("c0"),
        view("c1", "c0"),
        view("c2", "c0"),
        view("c3", "c1", state="evaluating"),  # in flight: counts as c1's child
        view("c4", "c1", state="rejected"),  # never existed as a program: not counted
        view("c5", "c0", state="declined"),
    ]
    gate = {"c0": 0.2, "c1": 0.6, "c2": 0.45}
    run = Run(cands, gate)
    kids = children_counts(run)
    assert kids == Counter({"c0": 3, "c1": 1})

    def expect(score: float, children: int) -> float:
        return 1 / (1 + math.exp(-10 * (score - 0.5))) / (1 + children)

    raw = {"c0": expect(0.2, 3), "c1": expect(0.6, 1), "c2": expect(0.45, 0)}
    want = {k: v / sum(raw.values()) for k, v in raw.items()}
    got = score_child_weights([(c, gate[c]) for c in ("c0", "c1", "c2")], kids, 10.0, 0.5)
    assert got == pytest.approx(want)

    op = ScoreChildProp(ScoreChildPropConfig())
    n = 6000
    picks = Counter(op.select(SelectContext(run, random.Random(s), 1)).parent for s in range(n))
    for cid, p in want.items():
        assert abs(picks[cid] / n - p) < 0.03, (cid, picks[cid] / n, p)


def test_score_child_prop_lambda_zero_ignores_scores() -> None:
    run = Run([view("a"), view("b", "a")], {"a": 0.0, "b": 1.0})
    w = score_child_weights([("a", 0.0), ("b", 1.0)], children_counts(run), 0.0, 0.5)
    assert w == pytest.approx({"a": 0.5 / 1.5, "b": 1 / 1.5})


def test_keep_all_admits_every_certified_child() -> None:
    run = Run([view("c0"), view("c1", "c0")], {"c0": 0.9, "c1": 0.1})
    ctx = GateContext(run, random.Random(0), 1, view("c1", "c0"), view("c0"))
    decision = KeepAll(KeepAll.Config()).gate(ctx)
    assert decision.admit and "0.100" in decision.reason


# -- pareto ------------------------------------------------------------------------------


def brute_force_front(matrix: dict[str, dict[str, float]]) -> set[str]:
    tasks = sorted({t for r in matrix.values() for t in r})
    vec = {c: tuple(r.get(t, 0.0) for t in tasks) for c, r in matrix.items()}
    front = set()
    for c, v in vec.items():
        beaten = False
        for o, w in vec.items():
            if o != c and all(x >= y for x, y in zip(w, v, strict=True)) and w != v:
                beaten = True
        if not beaten:
            front.add(c)
    return front


def test_objective_front_matches_brute_force_on_random_matrices() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n, m = rng.randint(1, 7), rng.randint(1, 5)
        matrix = {
            f"c{i}": {f"t{j}": float(rng.choice([0, 0.5, 1])) for j in range(m)} for i in range(n)
        }
        assert set(objective_front(matrix)) == brute_force_front(matrix)


def test_instance_front_counts_wins_and_drops_subsumed_members() -> None:
    matrix = {
        "a": {"t1": 1.0, "t2": 1.0, "t3": 0.0},  # wins t1, t2
        "b": {"t1": 1.0, "t2": 0.0, "t3": 0.0},  # wins t1 only: a subset of a's wins
        "c": {"t1": 0.0, "t2": 0.0, "t3": 1.0},  # the specialist: wins t3
        "d": {"t1": 0.5, "t2": 0.5, "t3": 0.5},  # wins nothing
    }
    assert instance_front(matrix) == {"a": 2, "c": 1}
    assert dominates(matrix["a"], matrix["b"], ["t1", "t2", "t3"])


def test_pareto_select_keeps_the_specialist_and_follows_win_counts() -> None:
    cands = [view(c) for c in "abcd"]
    train = {
        "a": {"t1": 1.0, "t2": 1.0, "t3": 0.0},
        "b": {"t1": 1.0, "t2": 0.0, "t3": 0.0},
        "c": {"t1": 0.0, "t2": 0.0, "t3": 1.0},
        "d": {"t1": 0.5, "t2": 0.5, "t3": 0.5},
    }
    run = Run(cands, {c: 0.5 for c in "abcd"}, train_rewards=train)
    op = Pareto(ParetoConfig())
    picks = Counter(op.select(SelectContext(run, random.Random(s), 1)).parent for s in range(3000))
    assert set(picks) == {"a", "c"}
    assert abs(picks["a"] / 3000 - 2 / 3) < 0.04
    obj = Pareto(ParetoConfig(frontier="objective"))
    got = {obj.select(SelectContext(run, random.Random(s), 1)).parent for s in range(200)}
    assert got == brute_force_front(train) == {"a", "c", "d"}


def test_pareto_without_train_rewards_raises() -> None:
    run = Run([view("a")], {"a": 0.3})
    with pytest.raises(ValueError, match="per-task train rewards"):
        Pareto(ParetoConfig()).select(SelectContext(run, random.Random(0), 1))


# -- paired_test -------------------------------------------------------------------------


def test_sign_test_matches_the_binomial_tail() -> None:
    assert sign_test_p([1, 1, 1, 1, 1]) == pytest.approx(1 / 32)
    assert sign_test_p([1, 1, -1, 0, 0]) == pytest.approx(0.5)  # ties drop out: P(X>=2 | 3)
    assert sign_test_p([0, 0]) == 1.0
    for wins, n in itertools.product(range(6), range(1, 6)):
        if wins > n:
            continue
        diffs = [1.0] * wins + [-1.0] * (n - wins)
        want = sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n
        assert sign_test_p(diffs) == pytest.approx(want)


def test_paired_bootstrap_p_is_small_for_a_clear_gain_and_large_for_none() -> None:
    assert paired_bootstrap_p([0.5] * 10, random.Random(0), 500) == 0.0
    assert paired_bootstrap_p([0.0] * 10, random.Random(0), 500) == 1.0
    mixed = paired_bootstrap_p([0.1, -0.1] * 10, random.Random(0), 2000)
    assert 0.3 < mixed < 0.8


def gctx(child: dict[str, float], parent: dict[str, float], open_: bool = True) -> GateContext:
    run = Run(
        [view("p"), view("k", "p")],
        {"p": 0.0, "k": 0.0},
        gate_rewards={"p": parent, "k": child},
        gate_detail_open=open_,
    )
    return GateContext(run, random.Random(0), 1, view("k", "p"), view("p"))


def test_paired_test_declines_a_one_item_gain_and_admits_a_consistent_one() -> None:
    tasks = [f"t{i}" for i in range(12)]
    parent = dict.fromkeys(tasks, 0.5)
    noise = {**parent, "t0": 0.55}  # +0.004 on average: noise
    clear = {t: 0.7 for t in tasks}
    op = PairedTest(PairedTestConfig())
    assert not op.gate(gctx(noise, parent)).admit
    decision = op.gate(gctx(clear, parent))
    assert decision.admit and "12 wins" in decision.reason
    boot = PairedTest(PairedTestConfig(test="bootstrap"))
    assert boot.gate(gctx(clear, parent)).admit and not boot.gate(gctx(noise, parent)).admit
    strict = PairedTest(PairedTestConfig(min_delta=0.5))
    assert not strict.gate(gctx(clear, parent)).admit


def test_paired_test_reads_gate_detail_only_through_its_declared_grant() -> None:
    assert PairedTest.grants == frozenset({"rewards:gate"})
    assert may_read("gate", "rewards:gate", grants=PairedTest.grants)
    assert not may_read("gate", "rewards:gate")
    assert not may_read("select", "rewards:gate", grants=PairedTest.grants)  # gate-only
    assert not may_read("gate", "rewards:sealed", grants=frozenset({"rewards:sealed"}))
    assert resolve("gate", "paired_test") is PairedTest


def test_an_operator_declaring_a_grant_its_slot_lacks_is_refused() -> None:
    class Greedy(KeepAll):
        grants = frozenset({"rewards:sealed"})

    import sys
    import types

    mod = types.ModuleType("greedy_gate_mod")
    mod.Greedy = Greedy  # type: ignore[attr-defined]
    sys.modules["greedy_gate_mod"] = mod
    try:
        with pytest.raises(OperatorNotFound, match="rewards:sealed"):
            resolve("gate", "greedy_gate_mod:Greedy")
    finally:
        del sys.modules["greedy_gate_mod"]


# -- islands -----------------------------------------------------------------------------


class FileRun(Run):
    def __init__(self, *a: Any, files: dict[str, bytes], **k: Any) -> None:
        super().__init__(*a, **k)
        self._files = files

    def read_file(self, cid: str, path: str) -> bytes:
        return self._files[cid]


def placed(cid: str, parent: str | None, island: int | None) -> CandidateView:
    v = view(cid, parent)
    return CandidateView(
        v.id, v.parent, v.generation, v.state, v.commit, v.tree, "", {"island": island}
    )


def test_feature_bins_numbers_choices_and_missing_values() -> None:
    from rsiframe.operators.islands import Feature

    f = Feature(kind="score", bins=4)
    assert [f.bin(v) for v in (0.0, 0.24, 0.25, 0.99, 1.0, 7.0, -1.0, None)] == [
        0,
        0,
        1,
        3,
        3,
        3,
        0,
        3,
    ]
    k = Feature(kind="knob", file="s.yaml", key="a.b", choices=["x", "y"])
    assert (k.bin("x"), k.bin("y"), k.bin("z")) == (0, 1, 2)
    with pytest.raises(ValueError, match="needs 'key'"):
        Feature(kind="knob", file="s.yaml")


def test_islands_place_children_round_robin_and_pick_elites_of_their_island() -> None:
    from rsiframe.operators.islands import Islands, IslandsConfig

    files = {
        "c0000": b"h: a\n",
        "c0001": b"h: a\n",
        "c0002": b"h: b\n",
        "c0003": b"h: b\n",
    }
    cands = [
        placed("c0000", None, None),  # the seed: on every island
        placed("c0001", "c0000", 0),
        placed("c0002", "c0000", 1),
        placed("c0003", "c0000", 1),
    ]
    gate = {"c0000": 0.1, "c0001": 0.5, "c0002": 0.3, "c0003": 0.6}
    run = FileRun(cands, gate, files=files)
    cfg = IslandsConfig(
        num_islands=2,
        migration_rate=0.0,
        exploitation=1.0,
        features=[{"kind": "knob", "file": "h.yaml", "key": "h", "choices": ["a", "b"]}],
    )
    op = Islands(cfg)
    # island 1's cells: 'a' holds the seed (0.1), 'b' holds c0003 (0.6) over c0002 (0.3)
    assert op.elites(run, 1) == {(0,): (0.1, "c0000"), (1,): (0.6, "c0003")}
    # island 0 sees the seed and c0001 in cell 'a': c0001 is the elite
    assert op.elites(run, 0) == {(0,): (0.5, "c0001")}
    sel0 = op.select(SelectContext(run, random.Random(0), 1, candidate_id="c0004"))
    sel1 = op.select(SelectContext(run, random.Random(0), 1, candidate_id="c0005"))
    assert (sel0.parent, sel0.placement) == ("c0001", {"island": 0, "cell": [0]})
    assert (sel1.parent, sel1.placement) == ("c0003", {"island": 1, "cell": [1]})
    # exploration draws any cell elite of the island, never another island's member
    explore = Islands(cfg.model_copy(update={"exploitation": 0.0}))
    picks = {
        explore.select(SelectContext(run, random.Random(s), 1, candidate_id="c0005")).parent
        for s in range(60)
    }
    assert picks == {"c0000", "c0003"}


def test_islands_migrate_from_the_ring_neighbour_on_migration_generations() -> None:
    from rsiframe.operators.islands import Islands, IslandsConfig

    cands = [placed("c0000", None, None), placed("c0001", "c0000", 0)]
    run = FileRun(cands, {"c0000": 0.1, "c0001": 0.9}, files={})
    cfg = IslandsConfig(num_islands=2, migration_interval=2, migration_rate=1.0, exploitation=1.0)
    op = Islands(cfg)
    # generation 2 migrates: the child for island 1 draws island 0's best elite
    sel = op.select(SelectContext(run, random.Random(0), 2, candidate_id="c0003"))
    assert sel.parent == "c0001" and sel.placement["migrated_from"] == 0
    # generation 1 does not: island 1 holds only the seed
    sel = op.select(SelectContext(run, random.Random(0), 1, candidate_id="c0003"))
    assert sel.parent == "c0000" and "migrated_from" not in sel.placement


# -- in real runs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        ["slots.select.operator=score_child_prop", "slots.gate.operator=keep_all"],
        ["slots.select.operator=pareto"],
        ["slots.gate.operator=paired_test"],
    ],
)
def test_method_operators_drive_a_real_run(tmp_path: Path, sets: list[str]) -> None:
    from conftest import cli, make_mini, status_json

    mini = make_mini(tmp_path / "proj", generations=2, children=2)
    res = cli(
        "run",
        mini.recipe,
        "--out",
        mini.run_dir(),
        "--quiet",
        *[a for s in sets for a in ("--set", s)],
    )
    assert res.exit_code == 0, res.stderr
    status = status_json(mini.run_dir())
    assert status["state"] == "finished"
    children = [c for c in status["candidates"] if c["parent"]]
    assert len(children) == 4
    if "slots.gate.operator=keep_all" in sets:
        assert all(c["state"] == "admitted" for c in children if c["scores"]["gate"] is not None)


def test_islands_placement_is_recorded_folded_and_shown(tmp_path: Path) -> None:
    from conftest import cli, events, make_mini, status_json

    mini = make_mini(tmp_path / "proj", generations=2, children=3)
    res = cli(
        "run",
        mini.recipe,
        "--out",
        mini.run_dir(),
        "--quiet",
        "--set",
        "slots.select.operator=islands",
        "--set",
        "slots.select.config={num_islands: 3, migration_rate: 0.0}",
    )
    assert res.exit_code == 0, res.stderr
    proposed = [
        e["data"]
        for e in events(mini.run_dir())
        if e["type"] == "candidate_proposed" and e["data"]["parent"]
    ]
    assert [p["placement"]["island"] for p in proposed] == [int(p["id"][1:]) % 3 for p in proposed]
    shown = {c["id"]: c["placement"] for c in status_json(mini.run_dir())["candidates"]}
    assert all(shown[p["id"]] == p["placement"] for p in proposed)


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["hill_climb", "dgm", "gepa", "islands"])
def test_offline_method_recipes_run_end_to_end_on_sat3(tmp_path: Path, method: str) -> None:
    from conftest import REPO, cli, status_json

    out = tmp_path / method
    res = cli(
        "run",
        REPO / "recipes" / "sat3" / f"{method}.yaml",
        "--out",
        out,
        "--quiet",
        "--set",
        "budget.max_generations=2",
        "--set",
        "children_per_generation=2",
    )
    assert res.exit_code == 0, res.stderr
    status = status_json(out)
    assert status["state"] == "finished"
    assert sum(1 for c in status["candidates"] if c["parent"]) == 4
    assert cli("verify", out).exit_code == 0


@pytest.mark.e2e
def test_hyperagents_recipe_evolves_its_own_candidate_carried_mutator(tmp_path: Path) -> None:
    from conftest import REPO, cli, status_json

    out = tmp_path / "hyperagents"
    res = cli(
        "run",
        REPO / "recipes" / "sat3" / "hyperagents.yaml",
        "--out",
        out,
        "--quiet",
        "--set",
        "budget.max_generations=2",
        "--set",
        "children_per_generation=3",
    )
    assert res.exit_code == 0, res.stderr
    status = status_json(out)
    assert status["state"] == "finished"
    children = [c for c in status["candidates"] if c["parent"]]
    assert len(children) == 6
    # the mutator ran from the candidate's tree, and changed its own parameters in some child
    changed = [c for c in children if "mutator:" in c["description"]]
    assert changed, [c["description"] for c in children]
    assert cli("verify", out).exit_code == 0
