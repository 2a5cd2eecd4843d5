"""The knobs mutate operator against a hand-made RunView: moves in the space, per seed,
inside the surface; a one-line diff."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rsiframe.operators.knobs import Knobs, KnobsConfig, KnobSpec
from tests.support.paths import REPO
from tests.support.runview import FakeRun, cand, mctx

# -- knobs -----------------------------------------------------------------------------


SPACE = [
    KnobSpec(file="cfg.yaml", key="solver.branching", choices=["first", "jw", "dlis"]),
    KnobSpec(file="cfg.yaml", key="solver.base", range=(10, 100), step=10),
    KnobSpec(file="cfg.yaml", key="decay", range=(0.5, 1.0), step=0.05),
    KnobSpec(file="p.json", key="temp", choices=[0.0, 0.5, 1.0]),
]


def write_cfg(d: Path) -> None:
    (d / "cfg.yaml").write_text(
        yaml.safe_dump({"solver": {"branching": "first", "base": 10}, "decay": 1.0})
    )
    (d / "p.json").write_text('{"temp": 0.0, "other": "x"}')


def test_knobs_moves_stay_in_the_space(tmp_path: Path) -> None:
    for seed in range(60):
        d = tmp_path / str(seed)
        d.mkdir()
        write_cfg(d)
        m = Knobs(KnobsConfig(knobs=SPACE, max_changes=2, max_steps=3)).mutate(mctx(d, seed))
        moves = m.details["moves"]
        assert 1 <= len(moves) <= 2
        cfg = yaml.safe_load((d / "cfg.yaml").read_text())
        import json

        p = json.loads((d / "p.json").read_text())
        assert cfg["solver"]["branching"] in ("first", "jw", "dlis")
        assert 10 <= cfg["solver"]["base"] <= 100 and isinstance(cfg["solver"]["base"], int)
        assert cfg["solver"]["base"] % 10 == 0
        assert 0.5 <= cfg["decay"] <= 1.0
        assert p["temp"] in (0.0, 0.5, 1.0) and p["other"] == "x"
        for mv in moves:
            assert mv["from"] != mv["to"]
        assert m.description == "; ".join(
            f"{mv['key']}: {mv['from']} -> {mv['to']}" for mv in moves
        )


def test_knobs_is_deterministic_per_seed(tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        d = tmp_path / f"r{i}"
        d.mkdir()
        write_cfg(d)
        outs.append(Knobs(KnobsConfig(knobs=SPACE)).mutate(mctx(d, 42)).details)
    assert outs[0] == outs[1]


def test_knobs_only_moves_knobs_inside_the_surface(tmp_path: Path) -> None:
    for seed in range(30):
        d = tmp_path / str(seed)
        d.mkdir()
        write_cfg(d)
        before = (d / "p.json").read_text()
        m = Knobs(KnobsConfig(knobs=SPACE)).mutate(mctx(d, seed, include=("cfg.yaml",)))
        assert {mv["file"] for mv in m.details["moves"]} == {"cfg.yaml"}
        assert (d / "p.json").read_text() == before
    with pytest.raises(ValueError, match="inside the recipe's surface"):
        Knobs(KnobsConfig(knobs=SPACE)).mutate(mctx(d, 0, include=("*",), exclude=("*",)))


def test_knobs_at_the_edge_moves_inward(tmp_path: Path) -> None:
    space = [KnobSpec(file="cfg.yaml", key="decay", range=(0.5, 1.0), step=0.05)]
    for seed in range(20):
        d = tmp_path / str(seed)
        d.mkdir()
        write_cfg(d)
        Knobs(KnobsConfig(knobs=space, max_steps=1)).mutate(mctx(d, seed))
        assert yaml.safe_load((d / "cfg.yaml").read_text())["decay"] == 0.95


def test_knobs_space_from_the_parent_tree(tmp_path: Path) -> None:
    write_cfg(tmp_path)
    space = yaml.safe_dump(
        {"knobs": [{"file": "cfg.yaml", "key": "solver.branching", "choices": ["first", "jw"]}]}
    ).encode()
    run = FakeRun([cand("c0")], {}, files={"knobs.yaml": space})
    m = Knobs(KnobsConfig(space="knobs.yaml")).mutate(mctx(tmp_path, 0, run))
    assert m.details["moves"] == [
        {"file": "cfg.yaml", "key": "solver.branching", "from": "first", "to": "jw"}
    ]


def test_knobs_config_errors() -> None:
    with pytest.raises(ValueError, match="exactly one of choices or range"):
        KnobSpec(file="a", key="b")
    with pytest.raises(ValueError, match="needs a step"):
        KnobSpec(file="a", key="b", range=(0, 1))
    with pytest.raises(ValueError, match="inline"):
        KnobsConfig()


def test_knobs_missing_key_or_file(tmp_path: Path) -> None:
    write_cfg(tmp_path)
    with pytest.raises(KeyError, match="no key nope"):
        Knobs(KnobsConfig(knobs=[KnobSpec(file="cfg.yaml", key="nope", choices=[1, 2])])).mutate(
            mctx(tmp_path, 0)
        )
    with pytest.raises(FileNotFoundError):
        Knobs(KnobsConfig(knobs=[KnobSpec(file="x.yaml", key="a", choices=[1, 2])])).mutate(
            mctx(tmp_path, 0)
        )


def test_knobs_change_is_a_one_line_diff_with_comments_kept(tmp_path: Path) -> None:
    seed = (REPO / "tasks" / "sat3" / "seed" / "solver.yaml").read_text()
    space = [
        KnobSpec(file="solver.yaml", key="branching", choices=["first", "jw", "dlis"]),
        KnobSpec(file="solver.yaml", key="restarts.base", range=(10, 400), step=10),
    ]
    for i in range(10):
        d = tmp_path / str(i)
        d.mkdir()
        (d / "solver.yaml").write_text(seed)
        m = Knobs(KnobsConfig(knobs=space, max_changes=1)).mutate(mctx(d, i))
        (move,) = m.details["moves"]
        before, after = seed.splitlines(), (d / "solver.yaml").read_text().splitlines()
        assert len(before) == len(after)
        changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
        assert len(changed) == 1, changed
        old, new = changed[0]
        assert "#" in new and old.split("#")[1] == new.split("#")[1]  # the comment stays
        assert str(move["to"]) in new
        assert type(move["to"]) in (str, int)  # plain JSON values in the record
