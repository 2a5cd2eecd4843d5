"""select ``openevolve``: OpenEvolve's program database as a select operator.

OpenEvolve (``algorithmicsuperintelligence/openevolve``, ``database.py`` and its
``database`` config) keeps ``num_islands`` islands, each a MAP-Elites grid over
``feature_dimensions``; a child joins its island. What this adds to :mod:`.islands`
(whose greedy policy the offline ``islands-policy`` recipe keeps):

- three parent-sampling branches with OpenEvolve's default ratios: ``exploration`` (0.2) a
  uniformly drawn member of the island, ``exploitation`` (0.7) a uniformly drawn member of
  the island's elite archive (its MAP-Elites cell elites), the rest (0.1) a uniformly
  drawn program of the whole run;
- persistent migration: at every ``migration_interval``-th generation the top
  ``migration_rate`` fraction (at least one) of each island's own programs is copied into
  both ring neighbours; a program migrates at most once, and a migrant is a member (and
  can be an elite) of its new islands in every later generation, with no new draw;
- the prompt's other programs: the island's ``num_top_programs`` best and ``num_diverse``
  elites of other cells than the parent's, named in the placement for the mutator
  (``openevolve_edit``) to show.

State is a fold over the run view (who joined which island in which generation, with
which score), so a resumed run and the viewer see the same islands. Programs are ranked by
train score, and a score feature must be on train (the ranking and the cells reach the
prompt; the gate split stays the champion's and the report's). A child stopped by a
cascade stage and archived ranks by that stage's score. Generations are the run's, not
per island.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from rsiframe.api import CandidateView, RunView, SelectContext, Selection
from rsiframe.operators.islands import Islands, IslandsConfig, candidate_number, island_of

Cell = tuple[int, ...]
BRANCHES = ("exploration", "exploitation", "random")


class OpenEvolveConfig(IslandsConfig):
    num_islands: int = Field(5, ge=1, le=64, description="islands (OpenEvolve: 5)")
    migration_interval: int = Field(
        50, ge=1, description="every this many generations, the islands migrate (OpenEvolve: 50)"
    )
    migration_rate: float = Field(
        0.1, ge=0, le=1, description="fraction of each island copied to both neighbours"
    )
    exploration: float = Field(0.2, ge=0, le=1, description="share of uniform island members")
    exploitation: float = Field(
        0.7, ge=0, le=1, description="share of uniform members of the island's elite archive"
    )
    split: Literal["train"] = Field(
        "train",
        description="the score programs are ranked by (elites, top, migrants): train only, "
        "since the ranking and the cells reach the mutation prompt",
    )
    num_top_programs: int = Field(3, ge=0, description="the island's best shown in the prompt")
    num_diverse: int = Field(2, ge=0, description="elites of other cells shown in the prompt")

    @model_validator(mode="after")
    def _shares(self) -> OpenEvolveConfig:
        if self.exploration + self.exploitation > 1 + 1e-9:
            raise ValueError("exploration + exploitation must be at most 1 (the rest: random)")
        if any(f.kind == "score" and f.split != "train" for f in self.features):
            raise ValueError("a score feature must be on train: cells are shown to the mutator")
        return self


@dataclass
class IslandState:
    """Who is on which island as of a generation: home members, migrants, and the seed."""

    members: dict[int, list[str]]
    migrants: dict[int, list[str]] = field(default_factory=dict)
    migrated: dict[str, int] = field(default_factory=dict)  # program -> generation it moved


def ranked(run: RunView, c: CandidateView, split: str) -> float | None:
    """A program's score on ``split``, or its cascade stage's when a stage stopped it."""
    score = run.score(c.id, split)
    if score is None and c.stopped_at and c.stopped_at.startswith(split):
        score = run.score(c.id, c.stopped_at)
    return score


class OpenEvolve(Islands):
    """OpenEvolve's parent sampling, persistent ring migration and prompt programs.

    Source: OpenEvolve ``database.py`` (``sample``, ``_sample_parent`` with
    ``exploration_ratio``/``exploitation_ratio``, ``migrate_programs``,
    ``_sample_inspirations``) and its ``database`` config defaults.
    """

    name = "openevolve"
    Config = OpenEvolveConfig
    config: OpenEvolveConfig

    def islands(self, run: RunView, generation: int) -> IslandState:
        """The islands as of ``generation``: every migration up to it replayed in order."""
        cfg = self.config
        admitted = run.admitted()
        state = IslandState(members={i: [] for i in range(cfg.num_islands)})
        for c in admitted:
            home = island_of(c)
            for i in range(cfg.num_islands) if home is None else [home % cfg.num_islands]:
                state.members[i].append(c.id)
        if cfg.num_islands < 2 or cfg.migration_rate <= 0:
            return state
        by_id = {c.id: c for c in admitted}
        for when in range(cfg.migration_interval, generation + 1, cfg.migration_interval):
            self._migrate(run, state, by_id, when)
        return state

    def _migrate(
        self, run: RunView, state: IslandState, by_id: dict[str, CandidateView], when: int
    ) -> None:
        """One migration: each island's best own programs made before ``when`` that never
        migrated are copied into both ring neighbours."""
        cfg, n = self.config, self.config.num_islands
        moving: dict[int, list[str]] = {}
        for i in range(n):
            own = [
                by_id[cid]
                for cid in state.members[i]
                if island_of(by_id[cid]) == i
                and by_id[cid].generation < when
                and cid not in state.migrated
            ]
            scored = [(s, c.id) for c in own if (s := ranked(run, c, cfg.split)) is not None]
            if not scored:
                continue
            scored.sort(key=lambda sc: (-sc[0], candidate_number(sc[1])))
            moving[i] = [cid for _, cid in scored[: max(1, int(len(own) * cfg.migration_rate))]]
        for i, cids in moving.items():
            for cid in cids:
                state.migrated[cid] = when
                for j in {(i - 1) % n, (i + 1) % n} - {i}:
                    if cid not in state.members[j]:
                        state.members[j].append(cid)
                        state.migrants.setdefault(j, []).append(cid)

    def cell_of(self, run: RunView, c: CandidateView) -> Cell:
        """The program's MAP-Elites cell; a score descriptor of a program a cascade stage
        stopped is that stage's score (the metrics it reached)."""
        return tuple(
            f.bin(ranked(run, c, f.split) if f.kind == "score" else f.value(run, c.id))
            for f in self.config.features
        )

    def archive(self, run: RunView, members: list[CandidateView]) -> dict[Cell, tuple[float, str]]:
        """The MAP-Elites elite of each cell among ``members`` (best score, earliest on ties)."""
        best: dict[Cell, tuple[float, int, str]] = {}
        for c in members:
            cid, score = c.id, ranked(run, c, self.config.split)
            if score is None:
                continue
            key, order = self.cell_of(run, c), candidate_number(cid)
            if key not in best or (-score, order) < (-best[key][0], best[key][1]):
                best[key] = (score, order, cid)
        return {k: (s, cid) for k, (s, _, cid) in best.items()}

    def branch(self, rng: random.Random) -> str:
        """OpenEvolve's branch draw: exploration, exploitation, else random."""
        r, cfg = rng.random(), self.config
        if r < cfg.exploration:
            return "exploration"
        return "exploitation" if r < cfg.exploration + cfg.exploitation else "random"

    def select(self, ctx: SelectContext) -> Selection:
        cfg, run = self.config, ctx.run
        island = candidate_number(ctx.candidate_id) % cfg.num_islands
        state = self.islands(run, ctx.generation)
        views = {c.id: c for c in run.admitted()}
        members = [views[cid] for cid in sorted(state.members[island], key=candidate_number)]
        elites = self.archive(run, members)
        if not members or not elites:
            raise ValueError(f"island {island} has no admitted program with a {cfg.split} score")
        how = self.branch(ctx.rng)
        if how == "exploration":
            parent = ctx.rng.choice(members).id
        elif how == "exploitation":
            parent = ctx.rng.choice(sorted(elites.values()))[1]
        else:
            parent = ctx.rng.choice(sorted(views, key=candidate_number))
        shown = self._shown(run, members, elites, views[parent], ctx.rng)
        placement: dict[str, Any] = {
            "island": island,
            "cell": list(self.cell_of(run, views[parent])),
            "branch": how,
            "members": len(members),
            "migrants": sorted(state.migrants.get(island, []), key=candidate_number),
            **shown,
        }
        return Selection(
            parent=parent,
            reason=f"island {island}, {how}: {parent} ({len(members)} members, "
            f"{len(elites)} cells, {len(placement['migrants'])} migrants)",
            placement=placement,
        )

    def _shown(
        self,
        run: RunView,
        members: list[CandidateView],
        elites: dict[Cell, tuple[float, str]],
        chosen: CandidateView,
        rng: random.Random,
    ) -> dict[str, Any]:
        """The island's top programs and diverse inspirations (elites of other cells)."""
        cfg, parent = self.config, chosen.id
        scored = [
            (s, c.id)
            for c in members
            if c.id != parent and (s := ranked(run, c, cfg.split)) is not None
        ]
        scored.sort(key=lambda sc: (-sc[0], candidate_number(sc[1])))
        top = [cid for _, cid in scored[: cfg.num_top_programs]]
        home = self.cell_of(run, chosen)
        cells = {cid: key for key, (_, cid) in elites.items() if key != home and cid != parent}
        others = sorted(cells, key=candidate_number)
        fresh = [cid for cid in others if cid not in top]  # not shown as a top program
        diverse = rng.sample(fresh, min(cfg.num_diverse, len(fresh)))
        rest = [cid for cid in others if cid in top]
        diverse += rng.sample(rest, min(cfg.num_diverse - len(diverse), len(rest)))
        return {
            "top": top,
            "inspirations": diverse,
            "inspiration_cells": [list(cells[cid]) for cid in diverse],
        }
