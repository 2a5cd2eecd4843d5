"""Islands of MAP-Elites archives: OpenEvolve's ``database`` policy as a select operator.

OpenEvolve (``algorithmicsuperintelligence/openevolve``, ``database`` section:
``num_islands``, ``migration_interval``, ``migration_rate``, ``feature_dimensions``,
``feature_bins``) keeps several sub-populations that evolve apart, each a MAP-Elites grid:
candidates are binned by descriptors (a knob value, a file's size, a score) and each cell
keeps its best. Diversity survives because a cell's elite competes only with its cell.

Here a child joins the island its proposal names; the seed belongs to every island. The
island is chosen round-robin by candidate number, the parent is an elite of that island
(the island's best with probability ``exploitation``, else a uniformly chosen cell
elite), and every ``migration_interval`` generations a proposal draws, with probability
``migration_rate``, an elite of the neighbouring island instead (a ring), so good code
migrates. The island, the parent's cell and any migration are recorded in the proposal
event (``Selection.placement``) and folded into the run state, so resume and the viewer
see them.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rsiframe.api import CandidateView, RunView, SelectContext, Selection, SelectOperator
from rsiframe.yamlsafe import load as yaml_load


class Feature(BaseModel):
    """One MAP-Elites descriptor of a candidate, binned into ``bins`` cells."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["knob", "size", "score"] = Field(
        description="knob: a YAML/JSON value in a file; size: a file's bytes; score: a score"
    )
    file: str | None = Field(None, description="knob and size: the file in the candidate")
    key: str | None = Field(None, description="knob: dotted key inside the file")
    split: Literal["train", "gate"] = Field("train", description="score: which split")
    choices: list[Any] | None = Field(None, description="knob: categorical values, one bin each")
    range: tuple[float, float] = Field((0.0, 1.0), description="numeric range spread over bins")
    bins: int = Field(4, ge=1, le=64, description="cells along this descriptor")

    @model_validator(mode="after")
    def _complete(self) -> Feature:
        if self.kind in ("knob", "size") and not self.file:
            raise ValueError(f"a {self.kind} feature needs 'file'")
        if self.kind == "knob" and not self.key:
            raise ValueError("a knob feature needs 'key'")
        if self.range[1] <= self.range[0]:
            raise ValueError("range must be [low, high] with low < high")
        return self

    def value(self, run: RunView, cid: str) -> Any:
        if self.kind == "score":
            return run.score(cid, self.split)
        assert self.file is not None
        try:
            raw = run.read_file(cid, self.file)
        except (KeyError, FileNotFoundError):
            return None
        if self.kind == "size":
            return len(raw)
        try:  # the candidate's file: no aliases, capped (rsiframe.yamlsafe)
            data: Any = yaml_load(raw.decode("utf-8", "replace"))
        except yaml.YAMLError:
            return None
        for part in (self.key or "").split("."):
            if not isinstance(data, dict) or part not in data:
                return None
            data = data[part]
        return data

    def bin(self, value: Any) -> int:
        """The cell index of ``value``; unknown or missing values go to the last cell."""
        if self.choices is not None:
            n = len(self.choices)
            return self.choices.index(value) if value in self.choices else n
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            return self.bins - 1
        lo, hi = self.range
        frac = (float(value) - lo) / (hi - lo)
        return min(self.bins - 1, max(0, int(frac * self.bins)))


class IslandsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    num_islands: int = Field(3, ge=1, le=64, description="sub-populations evolving apart")
    migration_interval: int = Field(
        2, ge=1, description="every this many generations, proposals may migrate"
    )
    migration_rate: float = Field(
        0.1, ge=0, le=1, description="probability a proposal takes a neighbour's elite"
    )
    exploitation: float = Field(
        0.7, ge=0, le=1, description="probability of the island's best elite (else any cell's)"
    )
    features: list[Feature] = Field(
        default_factory=lambda: [Feature(kind="score", split="train", bins=5)],
        description="MAP-Elites descriptors (feature_dimensions with feature_bins)",
    )


def island_of(c: CandidateView) -> int | None:
    """The island a candidate joined; None for the seed and candidates of other policies."""
    island = c.placement.get("island") if c.placement else None
    return island if isinstance(island, int) else None


def candidate_number(cid: str) -> int:
    digits = "".join(ch for ch in cid if ch.isdigit())
    return int(digits) if digits else 0


class Islands(SelectOperator):
    """Island-model MAP-Elites parent choice with ring migration.

    Source: OpenEvolve ``database`` (num_islands, migration_interval, migration_rate,
    feature_dimensions, feature_bins); MAP-Elites (Mouret & Clune 2015).
    """

    name = "islands"
    Config = IslandsConfig
    config: IslandsConfig

    def cell(self, run: RunView, cid: str) -> tuple[int, ...]:
        return tuple(f.bin(f.value(run, cid)) for f in self.config.features)

    def elites(self, run: RunView, island: int) -> dict[tuple[int, ...], tuple[float, str]]:
        """Best admitted candidate per cell among the island's members (and the seed)."""
        best: dict[tuple[int, ...], tuple[float, int, str]] = {}
        for i, c in enumerate(run.admitted()):
            home = island_of(c)
            if home is not None and home != island:
                continue
            score = run.score(c.id, "gate")
            if score is None:
                continue
            key = self.cell(run, c.id)
            if key not in best or (-score, i) < (-best[key][0], best[key][1]):
                best[key] = (score, i, c.id)
        return {k: (s, cid) for k, (s, _, cid) in best.items()}

    def select(self, ctx: SelectContext) -> Selection:
        cfg = self.config
        island = candidate_number(ctx.candidate_id) % cfg.num_islands
        source = island
        migrating = (
            cfg.num_islands > 1
            and ctx.generation % cfg.migration_interval == 0
            and ctx.rng.random() < cfg.migration_rate
        )
        if migrating:
            source = (island - 1) % cfg.num_islands
        cells = self.elites(ctx.run, source)
        if not cells and source != island:  # an empty neighbour: stay home
            source, cells = island, self.elites(ctx.run, island)
        if not cells:
            raise ValueError(f"island {island} has no admitted candidate with a gate score")
        keys = sorted(cells)
        if ctx.rng.random() < cfg.exploitation:
            key = min(keys, key=lambda k: -cells[k][0])
            how = "best elite"
        else:
            key = ctx.rng.choice(keys)
            how = "cell elite"
        score, pick = cells[key]
        placement: dict[str, Any] = {"island": island, "cell": list(key)}
        if source != island:
            placement["migrated_from"] = source
        where = f"island {island}" + (f" (from island {source})" if source != island else "")
        return Selection(
            parent=pick,
            reason=f"{where}, {how} of cell {list(key)} (gate {score:.3f}, {len(keys)} cells)",
            placement=placement,
        )
