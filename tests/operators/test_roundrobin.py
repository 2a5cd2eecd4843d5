"""GEPA's round-robin component selector: its order on synthetic runs, and across resume."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsiframe.api import CandidateView, MutateContext, Rollout
from rsiframe.operators.knobs import Knobs, KnobsConfig
from rsiframe.operators.roundrobin import (
    Pointers,
    RoundRobin,
    RoundRobinConfig,
    component_index,
)


def cand(
    cid: str, parent: str | None = None, gen: int = 1, state: str = "admitted", *more: str
) -> CandidateView:
    parents = (parent, *more) if parent else ()
    g = 0 if parent is None else gen
    return CandidateView(cid, parent, g, state, "c" * 40, cid, "", {}, parents)


class Run:
    lessons = ""

    def __init__(self, cands: list[CandidateView]) -> None:
        self._c = cands

    def candidates(self) -> list[CandidateView]:
        return list(self._c)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected read: {name}")


def test_children_of_one_parent_take_the_components_in_turn() -> None:
    # steady mode: every proposal is visible, one per generation
    seed = cand("c0000")
    kids = [cand(f"c000{i}", "c0000", i, "proposed") for i in range(1, 6)]
    run = Run([seed, *kids])
    assert [component_index(run, "c0000", k.id, k.generation, 3) for k in kids] == [0, 1, 2, 0, 1]


def test_siblings_hidden_by_the_generation_horizon_still_take_distinct_turns() -> None:
    # generational mode: c0001..c0003 of generation 1 see only the seed; their ids tell
    # how many proposals of their generation came first
    hidden = Run([cand("c0000")])
    assert [component_index(hidden, "c0000", f"c000{i}", 1, 4) for i in (1, 2, 3)] == [0, 1, 2]
    # and the full view, after the generation, gives the same turns
    full = Run([cand("c0000"), *[cand(f"c000{i}", "c0000", 1) for i in (1, 2, 3)]])
    p = Pointers.of(full)
    assert [p.start(f"c000{i}") for i in (1, 2, 3)] == [1, 2, 3]
    # generation 2 from the seed: three earlier children, first of its generation
    assert component_index(full, "c0000", "c0004", 2, 4) == 3


def test_a_child_continues_the_cycle_where_its_parent_left_it() -> None:
    run = Run(
        [
            cand("c0000"),
            cand("c0001", "c0000", 1),
            cand("c0002", "c0000", 2),
            cand("c0003", "c0002", 3),
        ]
    )
    p = Pointers.of(run)
    assert [p.start(c) for c in ("c0000", "c0001", "c0002", "c0003")] == [0, 1, 2, 3]
    # c0002 took component 1; its children take 2, then 3 (c0003 counted as earlier)
    assert component_index(run, "c0002", "c0004", 4, 5) == 3
    # the seed's next child takes 2 (two earlier children)
    assert component_index(run, "c0000", "c0004", 4, 5) == 2


def test_a_merge_starts_from_the_larger_pointer_and_takes_no_turn_of_its_parents() -> None:
    run = Run(
        [
            cand("c0000"),
            cand("c0001", "c0000", 1),
            cand("c0002", "c0001", 2),
            cand("c0003", "c0002", 3, "admitted", "c0000"),  # a merge of c0002 and c0000
        ]
    )
    p = Pointers.of(run)
    assert p.start("c0002") == 2
    assert p.start("c0003") == 2  # max(c0002's next turn 2, the seed's next turn 1)
    assert component_index(run, "c0000", "c0004", 4, 10) == 1  # the merge took no turn


def test_pointers_over_a_long_lineage_need_no_recursion() -> None:
    chain = [cand("c00000")] + [cand(f"c{i:05d}", f"c{i - 1:05d}", i) for i in range(1, 3000)]
    assert component_index(Run(chain), "c02999", "c03000", 3000, 7) == 2999 % 7


def mutate_ctx(tmp_path: Path, run: Run, parent: str, cid: str, **over: Any) -> MutateContext:
    work = tmp_path / cid
    work.mkdir()
    (work / "a.yaml").write_text("x: 1\ny: red\nz: 5\n")
    (work / "b.yaml").write_text("x: 1\n")
    base: dict[str, Any] = dict(
        run=run,
        rng=random.Random(0),
        generation=1,
        candidate_id=cid,
        parent=cand(parent),
        workdir=work,
        rollout=Rollout(trajectories=[]),
        analysis=None,
        lessons="",
        surface_include=("a.yaml", "b.yaml"),
        surface_exclude=(),
    )
    return MutateContext(**{**base, **over})


SPACE = [
    {"file": "a.yaml", "key": "x", "range": [0, 9], "step": 1},
    {"file": "a.yaml", "key": "y", "choices": ["red", "blue"]},
    {"file": "a.yaml", "key": "z", "range": [0, 9], "step": 1},
]


def test_knobs_round_robin_changes_exactly_the_knob_whose_turn_it_is(tmp_path: Path) -> None:
    op = Knobs(KnobsConfig(knobs=SPACE, max_changes=3, order="round_robin"))
    seed = cand("c0000")
    kids = [cand(f"c000{i}", "c0000", i, "proposed") for i in range(1, 5)]
    changed = []
    for k in kids:
        ctx = mutate_ctx(tmp_path, Run([seed, *kids]), "c0000", k.id, generation=k.generation)
        m = op.mutate(ctx)
        changed.append([mv["key"] for mv in m.details["moves"]])
    assert changed == [["x"], ["y"], ["z"], ["x"]]


def test_round_robin_wrapper_narrows_the_surface_to_one_file_in_turn(tmp_path: Path) -> None:
    op = RoundRobin(
        RoundRobinConfig(
            operator="knobs",
            config={"knobs": [*SPACE, {"file": "b.yaml", "key": "x", "range": [0, 9], "step": 1}]},
        )
    )
    seed = cand("c0000")
    kids = [cand(f"c000{i}", "c0000", i, "proposed") for i in range(1, 4)]
    seen = []
    for k in kids:
        ctx = mutate_ctx(tmp_path, Run([seed, *kids]), "c0000", k.id, generation=k.generation)
        m = op.mutate(ctx)
        seen.append((m.details["component"], {mv["file"] for mv in m.details["moves"]}))
    assert seen == [("a.yaml", {"a.yaml"}), ("b.yaml", {"b.yaml"}), ("a.yaml", {"a.yaml"})]


def test_round_robin_refuses_a_component_outside_the_surface(tmp_path: Path) -> None:
    op = RoundRobin(
        RoundRobinConfig(operator="knobs", config={"knobs": SPACE}, components=["c.yaml"])
    )
    ctx = mutate_ctx(tmp_path, Run([cand("c0000"), cand("c0001", "c0000")]), "c0000", "c0001")
    with pytest.raises(ValueError, match=r"c\.yaml lies outside"):
        op.mutate(ctx)


def test_round_robin_with_an_unknown_inner_operator_is_one_line(tmp_path: Path) -> None:
    from tests.support.cli import cli
    from tests.support.mini import make_mini

    mini = make_mini(tmp_path / "proj")
    res = cli(
        "recipe",
        "check",
        mini.recipe,
        "--set",
        "slots.mutate={operator: round_robin, config: {operator: knobz}}",
    )
    assert res.exit_code == 2
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "knobz" in res.stderr


# -- a real run, killed and resumed -------------------------------------------------------

RR = ["--set", "slots.mutate.config.order=round_robin"]


def knob_turns(run_dir: Path) -> dict[str, tuple[str | None, int, str]]:
    """Each child's parent, generation and the knob its mutation changed, from the events."""
    from tests.support.cli import events

    proposed: dict[str, tuple[str | None, int]] = {}
    out: dict[str, tuple[str | None, int, str]] = {}
    for e in events(run_dir):
        d = e["data"]
        if e["type"] == "candidate_proposed":
            proposed[d["id"]] = (d["parent"], d["generation"])
        if e["type"] in ("candidate_mutated", "candidate_rejected") and d["id"] != "c0000":
            text = d.get("description") or d.get("reason", "")
            out[d["id"]] = (*proposed[d["id"]], text)
    return out


def test_round_robin_order_survives_sigkill_and_resume(tmp_path: Path) -> None:
    from tests.support.cli import cli
    from tests.support.mini import make_mini

    mini = make_mini(tmp_path / "proj", generations=3, children=3)
    straight = tmp_path / "straight"
    assert cli("run", mini.recipe, "--out", straight, "--quiet", *RR).exit_code == 0
    killed = tmp_path / "killed"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rsiframe.cli.main",
            "run",
            str(mini.recipe),
            "--out",
            str(killed),
            "--quiet",
            *RR,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**__import__("os").environ, "RSIFRAME_FAULT": "kill:after:candidate_gated:3"},
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert cli("resume", killed, "--quiet").exit_code == 0
    a, b = knob_turns(straight), knob_turns(killed)
    assert a == b and len(a) >= 6
    # and the order is the round-robin one: recomputed from the lineage, knobs [level, style]
    start = {"c0000": 0}
    for cid in sorted(a):
        parent, gen, text = a[cid]
        earlier = sum(1 for c, (p, g, _) in a.items() if p == parent and g < gen)
        same = sum(1 for c, (_, g, _) in a.items() if g == gen and c < cid)
        turn = start[parent] + earlier + same
        start[cid] = turn + 1
        assert text.startswith(("level:", "style:")[turn % 2]), (cid, text, turn)
    assert len({text.split(":")[0] for _, _, text in a.values()}) == 2
    cfg = yaml.safe_load(mini.recipe.read_text())
    assert cfg["slots"]["mutate"]["operator"] == "knobs"
