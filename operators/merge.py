"""merge operators: plan a merge of the selected parent with a second admitted candidate.

The framework does the 3-way merge (:mod:`rsiframe.repo.merge`); an operator only plans it.

- ``three_way``: an rsiframe merge, not GEPA's: the partner is the admitted candidate with
  the best train score that is neither an ancestor nor a descendant of the selected
  parent (no front, ancestor or component condition), merged line by line against the
  nearest common ancestor; a conflict takes ``prefer: better`` (the side with the higher
  train score), ``first`` or ``second``, overridden per file by ``files: {glob: side}``.
- ``gepa``: GEPA's merge (gepa-ai/gepa ``MergeProposer``, ``use_merge``,
  ``max_merge_invocations``): scheduled only in the proposal right after a mutation child
  was accepted, at most ``max_merges`` accepted merges; both parents on the Pareto front
  of per-task train rewards (after GEPA's dominance removal), related only through a
  common ancestor whose train score is no better than either's and from which at least
  one component (a file of ``components``) changed on exactly one side; the ancestor is
  drawn in proportion to its train score; each component is taken whole from the side
  that changed it (both changed: the better side). Its acceptance is the validate slot's
  (``minibatch`` with ``merge_tasks``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rsiframe.api import CandidateView, MergeContext, MergeOperator, MergePlan, RunView
from rsiframe.operators.gepa import dominators, task_fronts, train_matrix

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
    """Merge the selected parent with the best unrelated admitted candidate (line by line)."""

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


# -- GEPA's merge ----------------------------------------------------------------------


class GepaMergeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    components: list[str] = Field(
        min_length=1, description="the files that are GEPA's components (e.g. the surface)"
    )
    max_merges: int = Field(5, ge=1, description="accepted merges at most (GEPA's default 5)")


def merges_due(run: RunView, max_merges: int) -> tuple[bool, str]:
    """GEPA's schedule, recomputed from the recorded proposals: one merge becomes due per
    accepted mutation child while fewer than ``max_merges`` merges were accepted, an
    accepted merge uses one up, and a merge is tried only right after an accepted
    mutation (GEPA's ``last_iter_found_new_program``)."""
    children = sorted((c for c in run.candidates() if c.parent is not None), key=lambda c: c.id)
    due = merged = 0
    last_new = False
    for c in children:
        accepted = c.state == "admitted"
        if len(c.parents) > 1:
            due, merged = (due - 1, merged + 1) if accepted else (due, merged)
            last_new = False
        else:
            due += accepted and merged < max_merges
            last_new = accepted
    if merged >= max_merges:
        return False, f"{merged} merges accepted (max_merges {max_merges})"
    if not last_new:
        return False, "the last proposal was not an accepted mutation"
    return due > 0, f"{due} merge(s) due"


def _component(run: RunView, cid: str, path: str) -> bytes | None:
    try:
        return run.read_file(cid, path)
    except (KeyError, FileNotFoundError, ValueError):
        return None


def one_sided(run: RunView, base: str, a: str, b: str, components: list[str]) -> bool:
    """Some component is changed on exactly one side (GEPA's desirable predictors)."""
    for path in components:
        o, x, y = (_component(run, c, path) for c in (base, a, b))
        if o in (x, y) and x != y:
            return True
    return False


def _related(run: RunView, a: str, b: str) -> bool:
    return a in _ancestors(run, b) or b in _ancestors(run, a)


def _merged_pairs(run: RunView) -> set[frozenset[str]]:
    return {frozenset(c.parents) for c in run.candidates() if len(c.parents) > 1}


class GepaMerge(MergeOperator):
    """GEPA's merge: two front candidates over an ancestor no better than either."""

    name = "gepa"
    Config = GepaMergeConfig
    config: GepaMergeConfig

    def merge(self, ctx: MergeContext) -> MergePlan:
        cfg: GepaMergeConfig = self.config
        due, why = merges_due(ctx.run, cfg.max_merges)
        if not due:
            return MergePlan(partner=None, reason=f"no merge: {why}")
        matrix = train_matrix(ctx.run)
        agg = {cid: sum(r.values()) / len(r) if r else 0.0 for cid, r in matrix.items()}
        front = dominators(task_fronts(matrix), agg)
        first = ctx.first.id
        if first not in front:
            return MergePlan(partner=None, reason=f"no merge: {first} is not on the front")
        done = _merged_pairs(ctx.run)
        partners = [c for c in front if c != first and frozenset((first, c)) not in done]
        ctx.rng.shuffle(partners)
        for second in partners:
            base = self._ancestor(ctx, first, second, agg)
            if base is not None:
                return self._plan(ctx, first, second, base, agg)
        return MergePlan(partner=None, reason="no merge: no front pair with a usable ancestor")

    def _ancestor(self, ctx: MergeContext, a: str, b: str, agg: dict[str, float]) -> str | None:
        """A common ancestor no better than either side with a one-sided component, drawn
        in proportion to its train score (uniformly when all are 0); None: no such one."""
        if _related(ctx.run, a, b):
            return None
        common = sorted((_ancestors(ctx.run, a) & _ancestors(ctx.run, b)) - {a, b})
        ok = [
            o
            for o in common
            if agg.get(o, 0.0) <= min(agg[a], agg[b])
            and one_sided(ctx.run, o, a, b, self.config.components)
        ]
        if not ok:
            return None
        weights = [agg.get(o, 0.0) for o in ok]
        return ctx.rng.choices(ok, weights=weights if sum(weights) > 0 else None, k=1)[0]

    def _plan(
        self, ctx: MergeContext, first: str, second: str, base: str, agg: dict[str, float]
    ) -> MergePlan:
        """Components changed on one side take that side (the 3-way merge does it); changed
        on both, the better side's whole file (a tie: drawn)."""
        if agg[first] != agg[second]:
            better: Literal["first", "second"] = "first" if agg[first] > agg[second] else "second"
        else:
            better = ctx.rng.choice(["first", "second"])
        return MergePlan(
            partner=second,
            base=base,
            prefer=better,
            granularity="file",
            reason=f"GEPA merge over ancestor {base} (train {agg.get(base, 0.0):.3f}); "
            f"components changed on both sides: the {better} side's",
        )
