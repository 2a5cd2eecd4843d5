"""OpenEvolve's program database as a select (issue 32): the three parent-sampling
branches at OpenEvolve's ratios, persistent ring migration folded from the run view, and
the top programs and inspirations named for the prompt."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pydantic import ValidationError

from rsiframe.api import CandidateView, SelectContext
from rsiframe.operators.openevolve import OpenEvolve, OpenEvolveConfig
from tests.support.methodview import Run

DRAWS = 10_000


def placed(cid: str, parent: str | None, island: int | None, generation: int) -> CandidateView:
    placement = {} if island is None else {"island": island}
    return CandidateView(
        cid, parent, generation, "admitted", "c" * 40, cid, "", placement, (), None, None
    )


def op(**cfg: object) -> OpenEvolve:
    cfg.setdefault("features", [{"kind": "score", "split": "train", "bins": 10}])
    return OpenEvolve(OpenEvolveConfig.model_validate(cfg))


def ctx(run: Run, cid: str, generation: int, rng: random.Random) -> SelectContext:
    return SelectContext(run, rng, generation, candidate_id=cid)


def test_branch_frequencies_match_openevolves_ratios_over_10000_draws() -> None:
    # island 0 (children numbered 0 mod 2): the seed (cell 0), c0002 and c0004 (one cell,
    # c0004 its elite); c0001 lives on island 1 and is reachable by the random branch only
    cands = [
        placed("c0000", None, None, 0),
        placed("c0001", "c0000", 1, 1),
        placed("c0002", "c0000", 0, 1),
        placed("c0004", "c0000", 0, 1),
    ]
    run = Run(cands, {"c0000": 0.05, "c0001": 0.9, "c0002": 0.55, "c0004": 0.57})
    select, rng = op(num_islands=2, migration_interval=100), random.Random(7)
    branches: Counter[str] = Counter()
    parents: Counter[str] = Counter()
    for _ in range(DRAWS):
        s = select.select(ctx(run, "c0010", 1, rng))
        branches[s.placement["branch"]] += 1
        parents[s.parent] += 1
        if s.placement["branch"] == "exploitation":  # only the island's cell elites
            assert s.parent in ("c0000", "c0004")
    for branch, share in {"exploration": 0.2, "exploitation": 0.7, "random": 0.1}.items():
        assert branches[branch] / DRAWS == pytest.approx(share, abs=0.02)
    # c0002 is no elite: only exploration (1/3 of 0.2) and random (1/4 of 0.1) draw it
    assert parents["c0002"] / DRAWS == pytest.approx(0.2 / 3 + 0.1 / 4, abs=0.015)
    assert parents["c0001"] / DRAWS == pytest.approx(0.1 / 4, abs=0.01)  # another island


def test_ratios_are_configurable_and_must_leave_room_for_random() -> None:
    cands = [placed("c0000", None, None, 0), placed("c0002", "c0000", 0, 1)]
    run = Run(cands, {"c0000": 0.1, "c0002": 0.5})
    select, rng = op(num_islands=2, exploration=1.0, exploitation=0.0), random.Random(0)
    assert {select.select(ctx(run, "c0004", 1, rng)).placement["branch"] for _ in range(50)} == {
        "exploration"
    }
    with pytest.raises(ValidationError, match="at most 1"):
        OpenEvolveConfig(exploration=0.5, exploitation=0.6)


def test_no_gate_score_can_shape_what_the_mutator_is_shown() -> None:
    """The ranking (top programs, elites) and the cells reach the mutation prompt: a gate
    descriptor or a gate ranking would leak the gate split to the mutator."""
    with pytest.raises(ValidationError, match="must be on train"):
        OpenEvolveConfig.model_validate({"features": [{"kind": "score", "split": "gate"}]})
    with pytest.raises(ValidationError):
        OpenEvolveConfig.model_validate({"split": "gate"})
    # train ranks, whatever the gate says: c0004 is best on train, worst on gate
    cands = [placed("c0000", None, None, 0)] + [placed(f"c000{i}", "c0000", 0, 1) for i in (2, 4)]

    class SplitRun(Run):
        def score(self, cid: str, split: str) -> float | None:
            train = {"c0000": 0.1, "c0002": 0.3, "c0004": 0.9}
            return train[cid] if split == "train" else 1.0 - train[cid]

    s = op(num_islands=2, exploration=1.0, exploitation=0.0).select(
        ctx(SplitRun(cands, {}), "c0010", 1, random.Random(0))
    )
    assert s.placement["top"][0] == ("c0004" if s.parent != "c0004" else "c0002")


def migration_run() -> Run:
    cands = [
        placed("c0000", None, None, 0),
        placed("c0001", "c0000", 1, 1),
        placed("c0002", "c0000", 2, 1),
        placed("c0003", "c0000", 0, 1),
        placed("c0006", "c0000", 0, 1),
        placed("c0009", "c0003", 0, 3),
    ]
    gate = {"c0000": 0.1, "c0001": 0.3, "c0002": 0.2, "c0003": 0.4, "c0006": 0.95, "c0009": 0.6}
    return Run(cands, gate)


def test_a_migrated_elite_stays_on_both_neighbours_without_a_new_draw_and_migrates_once() -> None:
    run = migration_run()
    select = op(num_islands=3, migration_interval=2, migration_rate=0.5)
    before = select.islands(run, 1)
    assert "c0006" not in before.members[1] and not before.migrants
    for generation in (2, 3, 4, 5, 6, 8):
        state = select.islands(run, generation)
        # copied into both ring neighbours at generation 2, and still there afterwards
        assert state.migrated["c0006"] == 2
        assert state.members[1].count("c0006") == 1 and state.members[2].count("c0006") == 1
        assert "c0006" in state.migrants[1] and "c0006" in state.migrants[2]
        # the elite of its cell on the neighbour's archive
        views = {c.id: c for c in run.admitted()}
        archive = select.archive(run, [views[c] for c in state.members[1]])
        assert (0.95, "c0006") in archive.values()
    # at generation 4 island 0's best own program not yet moved (c0009, made in generation
    # 3) migrates, c0006 not again; a migrant never migrates on from its new island
    later = select.islands(run, 4)
    assert later.migrated["c0009"] == 4 and "c0003" not in later.migrated
    assert later.migrated["c0001"] == 2 and later.members[0].count("c0006") == 1
    assert later.members[0].count("c0001") == 1  # c0001 came in from island 1, once
    # the same view gives the same islands to a fresh operator (a fold, no draws)
    again = op(num_islands=3, migration_interval=2, migration_rate=0.5).islands(run, 4)
    assert again == later


def test_a_neighbours_proposals_draw_the_migrant_and_name_it_in_the_placement() -> None:
    run = migration_run()
    select = op(num_islands=3, migration_interval=2, migration_rate=0.5, exploitation=1.0,
                exploration=0.0)  # fmt: skip
    rng = random.Random(3)
    # c0010 is on island 1 (10 mod 3); at generation 1 there is no migrant yet
    first = {select.select(ctx(run, "c0010", 1, rng)).parent for _ in range(100)}
    assert "c0006" not in first
    picks = [select.select(ctx(run, "c0010", 3, rng)) for _ in range(200)]
    assert "c0006" in {s.parent for s in picks}
    assert all(s.placement["migrants"] == ["c0002", "c0006"] for s in picks)


def test_top_programs_and_inspirations_from_other_cells() -> None:
    cands = [placed("c0000", None, None, 0)] + [
        placed(f"c000{i}", "c0000", 0, 1) for i in (2, 4, 6, 8)
    ]
    scores = {"c0000": 0.05, "c0002": 0.35, "c0004": 0.55, "c0006": 0.75, "c0008": 0.95}
    run = Run(cands, scores)
    select = op(num_islands=2, num_top_programs=3, num_diverse=2, exploration=1.0,
                exploitation=0.0)  # fmt: skip
    rng = random.Random(1)
    for _ in range(50):
        s = select.select(ctx(run, "c0010", 1, rng))
        others = sorted((scores[c], c) for c in scores if c != s.parent)
        assert s.placement["top"] == [c for _, c in reversed(others)][:3]
        assert len(s.placement["inspirations"]) == 2 and s.parent not in s.placement["inspirations"]
        cells = {tuple(c) for c in s.placement["inspiration_cells"]}
        assert len(cells) == 2 and tuple(s.placement["cell"]) not in cells
