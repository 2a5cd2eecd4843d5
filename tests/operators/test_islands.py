"""The islands select: feature bins, placement, elites, migration; placement recorded,
folded and shown in a real run."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from rsiframe.api import CandidateView, SelectContext
from tests.support.methodview import Run, view

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


def test_islands_placement_is_recorded_folded_and_shown(tmp_path: Path) -> None:
    from tests.support.cli import cli, events, status_json
    from tests.support.mini import make_mini

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
