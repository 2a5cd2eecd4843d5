"""GEPA's component selector ``round_robin``: a candidate's components are mutated in turn.

GEPA (Agrawal et al. 2025, ``gepa-ai/gepa``, ``optimize(module_selector="round_robin")``,
``RoundRobinReflectionComponentSelector``) keeps, per candidate, a pointer to the component
(a named prompt) its next reflective mutation rewrites. Each proposal from a parent takes
the parent's pointer and advances it by one; the child starts from the advanced pointer (a
merge child from the larger of its parents' pointers). So every component gets its turn,
and a lineage keeps cycling where its ancestors left off.

GEPA proposes one child at a time. rsiframe proposes a generation's children together, and
in generational mode a child's operators see only earlier generations (so the result does
not depend on how many run at once). The turn is therefore counted as::

    turn(c) = start(parent) + children of parent in earlier generations
                            + proposals of c's own generation before c (any parent)

With one parent per generation (``best``) this is exactly GEPA's order; with several, a
parent's children in one generation still take distinct components. ``start(c)`` is
``turn(c) + 1`` (a merge: the larger of its parents' turns). Nothing is held in memory:
everything is recomputed from the candidates the run recorded, so a resumed run continues
the cycle exactly where the interrupted one stopped (a proposal a crash abandoned used its
turn).

Two ways to use it: the ``knobs`` mutator's ``order: round_robin`` (each knob of the space
is a component; one knob per child), and the ``round_robin`` mutate operator here, which
wraps another mutate operator and narrows the surface it sees to one file per child (the
files of the surface are the components; e.g. ``llm_edit`` over several prompt files).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rsiframe.api import (
    CandidateView,
    MutateContext,
    MutateOperator,
    Mutation,
    RunStart,
    RunView,
)


def _num(cid: str) -> int:
    """The proposal number of a candidate id (``c0012`` -> 12)."""
    digits = "".join(ch for ch in cid if ch.isdigit())
    if not digits:
        raise ValueError(f"round_robin: candidate id {cid!r} has no proposal number")
    return int(digits)


class Pointers:
    """Round-robin pointers of a run's candidates, recomputed from what the run recorded.

    A parent always has a smaller id than its children, so one pass in id order sees every
    parent's pointer before its children need it."""

    def __init__(self, candidates: list[CandidateView]) -> None:
        self._seen = {_num(c.id) for c in candidates}
        #: single-parent children per parent: (generation, number)
        self._children: dict[str, list[tuple[int, int]]] = {}
        self._per_gen: dict[int, list[int]] = {}
        self._start: dict[str, int] = {}
        for c in sorted(candidates, key=lambda c: _num(c.id)):
            parents = [p for p in (c.parents or (c.parent,)) if p is not None]
            n, g = _num(c.id), c.generation
            if not parents:
                self._start[c.id] = 0
            elif len(parents) > 1:  # GEPA: a merge starts from its parents' largest pointer
                self._start[c.id] = max(self.turn(p, n, g) for p in parents)
            else:
                self._start[c.id] = self.turn(parents[0], n, g) + 1
                self._children.setdefault(parents[0], []).append((g, n))
            self._per_gen.setdefault(g, []).append(n)

    @classmethod
    def of(cls, run: RunView) -> Pointers:
        return cls(run.candidates())

    def start(self, cid: str) -> int:
        """The pointer a candidate started with (the seed: 0)."""
        return self._start.get(cid, 0)

    def turn(self, parent: str, number: int, generation: int) -> int:
        """The (unreduced) component index of proposal ``number`` of ``generation`` from
        ``parent``. Proposals hidden from this view (same generation, generational mode)
        are the missing numbers below ``number``."""
        earlier = sum(1 for g, _ in self._children.get(parent, []) if g < generation)
        same = sum(1 for n in self._per_gen.get(generation, []) if n < number)
        hidden = sum(1 for n in range(number) if n not in self._seen)
        return self.start(parent) + earlier + same + hidden


def component_index(run: RunView, parent: str, candidate_id: str, generation: int, n: int) -> int:
    """Which of ``n`` components the child ``candidate_id`` of ``parent`` mutates."""
    if n < 1:
        raise ValueError("round_robin needs at least one component")
    return Pointers.of(run).turn(parent, _num(candidate_id), generation) % n


class RoundRobinConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    operator: str = Field(description="the mutate operator that makes each change, e.g. llm_edit")
    config: dict[str, Any] = Field(default_factory=dict, description="that operator's config")
    components: list[str] = Field(
        default_factory=list,
        description="files taken in turn (default: every file of the parent the surface allows)",
    )

    @model_validator(mode="after")
    def _inner_exists(self) -> RoundRobinConfig:
        """The wrapped operator and its config are checked with the recipe, not at mutate."""
        from rsiframe.slots.registry import resolve

        if self.operator == "round_robin":
            raise ValueError("round_robin cannot wrap itself")
        try:
            inner = resolve("mutate", self.operator)
        except Exception as exc:  # the registry gives one line
            raise ValueError(str(exc)) from None
        try:
            inner.Config.model_validate(self.config)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"config of {self.operator}: {where}: {first['msg']}") from None
        return self


def surface_file_list(ctx: MutateContext) -> list[str]:
    """Every file of the work folder (the parent's tree) the surface allows, sorted."""
    root = ctx.workdir
    found = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return sorted(f for f in found if not f.startswith(".git/") and ctx.may_change(f))


class RoundRobin(MutateOperator):
    """GEPA's round-robin component selector around another mutate operator.

    Each child mutates one component, in turn per lineage: the wrapped operator sees a
    surface narrowed to that one file. Components are `components:` or every file of the
    parent the recipe's surface allows (sorted). The turn is recomputed from the run's
    recorded candidates, so resume continues the cycle. Source: GEPA
    `RoundRobinReflectionComponentSelector` (`module_selector="round_robin"`).
    """

    name = "round_robin"
    Config = RoundRobinConfig
    config: RoundRobinConfig

    def __init__(self, config: BaseModel) -> None:
        super().__init__(config)
        from rsiframe.slots.registry import resolve

        cfg: RoundRobinConfig = self.config
        inner = resolve("mutate", cfg.operator)
        op = inner(inner.Config.model_validate(cfg.config))
        assert isinstance(op, MutateOperator)  # resolve() checks the slot's base class
        self.inner = op

    def draws(self, start: RunStart) -> bool:
        return self.inner.draws(start)  # the turn is counted, never drawn

    def start_warnings(self, start: RunStart) -> list[str]:
        return self.inner.start_warnings(start)

    def mutate(self, ctx: MutateContext) -> Mutation:
        cfg: RoundRobinConfig = self.config
        components = list(cfg.components) or surface_file_list(ctx)
        if not components:
            raise ValueError("round_robin: the surface allows no file of the parent")
        outside = [c for c in components if not ctx.may_change(c)]
        if outside:
            raise ValueError(f"round_robin: {outside[0]} lies outside the recipe's surface")
        k = component_index(
            ctx.run, ctx.parent.id, ctx.candidate_id, ctx.generation, len(components)
        )
        part = components[k]
        narrowed = dataclasses.replace(ctx, surface_include=(part,))
        result = self.inner.mutate(narrowed)
        details = {**result.details, "component": part, "component_index": k}
        return result.model_copy(
            update={"description": f"[{part}] {result.description}", "details": details}
        )
