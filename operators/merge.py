"""merge `three_way`: plan a merge of the selected parent with a second admitted candidate.

GEPA (Agrawal et al. 2025, gepa-ai/gepa, ``use_merge``/``max_merge_invocations``) merges
two candidates on the Pareto front that descend from a common ancestor and have each
improved different components; the result keeps each side's own changes. This operator
chooses the partner (an admitted candidate that is neither an ancestor nor a descendant
of the selected parent, best train score first) and says which side wins a conflict:
``prefer: better`` (the side with the higher train score), ``first`` or ``second``,
overridden per file by ``files: {glob: side}``. The framework does the 3-way merge
(:mod:`rsiframe.repo.merge`). Hook (issue 13): with a model declared, conflicts will go to
the model; this operator's plan is the offline resolution.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import CandidateView, MergeContext, MergeOperator, MergePlan, RunView

Side = Literal["better", "first", "second"]


class ThreeWayConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prefer: Side = Field("better", description="the side a conflicting file takes")
    files: dict[str, Side] = Field(default_factory=dict, description="per-file side (glob)")


def _train(run: RunView, cid: str) -> float:
    score = run.score(cid, "train")
    return score if score is not None else float("-inf")


def _ancestors(run: RunView, cid: str) -> set[str]:
    seen, todo = set(), [cid]
    while todo:
        c = run.candidate(todo.pop())
        if c.id not in seen:
            seen.add(c.id)
            todo.extend(c.parents or ([c.parent] if c.parent else []))
    return seen


def partners(run: RunView, first: str) -> list[CandidateView]:
    """Admitted candidates related to ``first`` only through a common ancestor, best first."""
    mine = _ancestors(run, first)
    out = [c for c in run.admitted() if c.id not in mine and first not in _ancestors(run, c.id)]
    return sorted(out, key=lambda c: (-_train(run, c.id), c.id))


class ThreeWay(MergeOperator):
    """Merge the selected parent with the best unrelated admitted candidate (GEPA's merge)."""

    name = "three_way"
    deterministic = True
    Config = ThreeWayConfig
    config: ThreeWayConfig

    def merge(self, ctx: MergeContext) -> MergePlan:
        cfg: ThreeWayConfig = self.config
        found = partners(ctx.run, ctx.first.id)
        if not found:
            return MergePlan(partner=None, reason="no admitted candidate outside its lineage")
        second = found[0]
        better: Literal["first", "second"] = (
            "second" if _train(ctx.run, second.id) > _train(ctx.run, ctx.first.id) else "first"
        )

        def side(s: Side) -> Literal["first", "second"]:
            return better if s == "better" else s

        return MergePlan(
            partner=second.id,
            prefer=side(cfg.prefer),
            files={g: side(s) for g, s in cfg.files.items()},
            reason=f"best train score outside {ctx.first.id}'s lineage; conflicts: {cfg.prefer}",
        )
