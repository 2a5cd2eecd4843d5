"""gate: admit or decline a certified child, reading only verified gate scores."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import GateContext, GateDecision, GateOperator


def _gate_score(ctx: GateContext, cid: str) -> float:
    score = ctx.run.score(cid, "gate")
    if score is None:
        raise ValueError(f"{cid} has no verified gate score")
    return score


class ImprovesParentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_delta: float = Field(0.0, ge=0, description="the child must beat its parent by more")


class ImprovesParent(GateOperator):
    """Admit when the child's gate score beats its parent's by more than ``min_delta``."""

    name = "improves_parent"
    deterministic = True
    Config = ImprovesParentConfig
    config: ImprovesParentConfig

    def gate(self, ctx: GateContext) -> GateDecision:
        child = _gate_score(ctx, ctx.candidate.id)
        parent = _gate_score(ctx, ctx.parent.id)
        delta = child - parent
        admit = delta > self.config.min_delta
        verb = "improves on" if admit else "does not improve on"
        return GateDecision(
            admit=admit, reason=f"gate {child:.3f} {verb} parent {parent:.3f} ({delta:+.3f})"
        )


class ThresholdConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_score: float = Field(description="admit when the gate score is at least this")


class Threshold(GateOperator):
    """Admit when the child's gate score reaches ``min_score``."""

    name = "threshold"
    deterministic = True
    Config = ThresholdConfig
    config: ThresholdConfig

    def gate(self, ctx: GateContext) -> GateDecision:
        score = _gate_score(ctx, ctx.candidate.id)
        admit = score >= self.config.min_score
        cmp = ">=" if admit else "<"
        return GateDecision(
            admit=admit, reason=f"gate {score:.3f} {cmp} threshold {self.config.min_score:g}"
        )


class Always(GateOperator):
    """Admit every certified child (for ablations and open-ended archives)."""

    name = "always"
    deterministic = True

    def gate(self, ctx: GateContext) -> GateDecision:
        return GateDecision(admit=True, reason="always admit")
