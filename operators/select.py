"""select: choose the parent of the next child among admitted candidates."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import (
    CandidateView,
    RunStart,
    RunView,
    SelectContext,
    Selection,
    SelectOperator,
)


def ranked(run: RunView) -> list[tuple[float, CandidateView]]:
    """Admitted candidates by verified gate score, best first (older first on ties)."""
    kept = getattr(run, "ranked", None)  # perf: the engine's view keeps this ranking
    if kept is not None:
        return kept("gate")
    scored = [(run.score(c.id, "gate"), i, c) for i, c in enumerate(run.admitted())]
    rows = [(s, i, c) for s, i, c in scored if s is not None]
    rows.sort(key=lambda r: (-r[0], r[1]))
    return [(s, c) for s, _, c in rows]


def _need(rows: list[tuple[float, CandidateView]]) -> None:
    if not rows:
        raise ValueError("no admitted candidate with a gate score to select from")


class BestConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    top_k: int = Field(1, ge=1, description="pick uniformly among the k best")


class Best(SelectOperator):
    """The best admitted candidate by gate score (or one of the top k)."""

    name = "best"
    Config = BestConfig
    config: BestConfig

    def draws(self, start: RunStart) -> bool:
        return self.config.top_k > 1

    def select(self, ctx: SelectContext) -> Selection:
        rows = ranked(ctx.run)
        _need(rows)
        score, pick = ctx.rng.choice(rows[: self.config.top_k])
        return Selection(parent=pick.id, reason=f"best (gate {score:.3f})")


class TournamentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = Field(3, ge=1, description="contestants drawn per tournament")


class Tournament(SelectOperator):
    """Draw ``size`` admitted candidates at random; the best of them wins."""

    name = "tournament"
    Config = TournamentConfig
    config: TournamentConfig

    def select(self, ctx: SelectContext) -> Selection:
        rows = ranked(ctx.run)
        _need(rows)
        drawn = ctx.rng.sample(range(len(rows)), min(self.config.size, len(rows)))
        score, pick = rows[min(drawn)]  # rows are ranked, so the lowest index wins
        return Selection(parent=pick.id, reason=f"tournament of {len(drawn)} (gate {score:.3f})")


class EpsilonGreedyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    epsilon: float = Field(0.2, ge=0, le=1, description="probability of a uniform pick")


class EpsilonGreedy(SelectOperator):
    """The best candidate, except with probability epsilon a uniformly random one."""

    name = "epsilon_greedy"
    Config = EpsilonGreedyConfig
    config: EpsilonGreedyConfig

    def draws(self, start: RunStart) -> bool:
        return self.config.epsilon > 0

    def select(self, ctx: SelectContext) -> Selection:
        rows = ranked(ctx.run)
        _need(rows)
        if ctx.rng.random() < self.config.epsilon:
            score, pick = ctx.rng.choice(rows)
            return Selection(parent=pick.id, reason=f"explore (gate {score:.3f})")
        score, pick = rows[0]
        return Selection(parent=pick.id, reason=f"exploit (gate {score:.3f})")


class Uniform(SelectOperator):
    """A uniformly random admitted candidate."""

    name = "uniform"

    def select(self, ctx: SelectContext) -> Selection:
        rows = ranked(ctx.run)
        _need(rows)
        score, pick = ctx.rng.choice(rows)
        return Selection(parent=pick.id, reason=f"uniform (gate {score:.3f})")
