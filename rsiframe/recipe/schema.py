"""The recipe schema: pydantic models only, at the bottom of the import graph.

Readers of a run (``budget``, ``report``, the viewer) validate a frozen recipe with
these models without importing the evaluator, builds, serving or the sandbox;
``recipe.py`` adds loading, ``extends:``, ``--set`` and operator resolution on top.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from rsiframe.api import SLOT_TABLE, SlotSpec
from rsiframe.recipe.executor import ExecutorSpec
from rsiframe.recipe.models import Models
from rsiframe.repo.gittree import DEFAULT_IGNORE


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SlotChoice(_Strict):
    """The operator a recipe puts in one slot, and its config."""

    operator: str = Field(description="operator name, module:Class or path/file.py:Class")
    config: dict[str, Any] = Field(default_factory=dict)


class SplitSpec(_Strict):
    train: list[str] | None = None
    gate: list[str] | None = None
    sealed: list[str] | None = None
    ratios: dict[Literal["train", "gate", "sealed"], float] | None = None
    seed: int = 0

    @model_validator(mode="after")
    def _one_kind(self) -> SplitSpec:
        lists = [self.train, self.gate, self.sealed]
        if self.ratios is not None and any(x is not None for x in lists):
            raise ValueError("give either explicit train/gate/sealed lists or ratios, not both")
        if self.ratios is None and any(x is not None for x in lists) and None in lists:
            raise ValueError("explicit splits need all of train, gate and sealed")
        ratios = self.ratios or {}
        if any(v < 0 for v in ratios.values()) or sum(ratios.values()) > 1.0001:
            raise ValueError("ratios must be non-negative and sum to at most 1")
        return self

    def lists(self) -> dict[str, list[str]] | None:
        if self.train is None:
            return None
        return {"train": self.train, "gate": self.gate or [], "sealed": self.sealed or []}


class TasksSpec(_Strict):
    path: Path
    split: SplitSpec = Field(
        default_factory=lambda: SplitSpec(ratios={"train": 0.5, "gate": 0.3, "sealed": 0.2})
    )


class SurfaceSpec(_Strict):
    include: list[str] = Field(min_length=1, description="globs a mutation may change")
    exclude: list[str] = Field(default_factory=list)
    ignore: list[str] = Field(
        default_factory=lambda: list(DEFAULT_IGNORE), description="paths never committed (caches)"
    )


class StageSpec(_Strict):
    """One stage of a child's evaluation cascade (DGM, HyperAgents, OpenEvolve)."""

    split: Literal["train", "gate"] = Field(description="the split whose tasks it runs")
    tasks: int | None = Field(None, ge=1, description="a fixed subset of this many tasks")
    min_score: float | None = Field(None, description="below this, the child stops here")
    on_fail: Literal["reject", "archive"] = Field(
        "reject",
        description="a child stopped here: rejected, or archived (admitted) with this "
        "stage's score, a stepping stone with a low weight (DGM)",
    )


class EvaluatorSpec(_Strict):
    engine: str = "local"
    config: dict[str, Any] = Field(default_factory=dict)
    #: a child's evaluation as a cascade of stages; empty: train, then gate
    stages: list[StageSpec] = Field(default_factory=list)
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec)


class _SlotsBase(_Strict):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def get(self, slot: str) -> SlotChoice | None:
        return getattr(self, _field(slot))


def _field(slot: str) -> str:
    """The attribute of a slot (``validate`` would shadow pydantic's own method)."""
    return slot + "_" if hasattr(BaseModel, slot) else slot


class MergeChoice(SlotChoice):
    """The ``merge`` slot also says how often a proposal is a merge instead of a mutation."""

    rate: float = Field(0.2, ge=0, le=1, description="probability that a proposal is a merge")


#: slots whose recipe entry carries more than operator and config
_CHOICES: dict[str, type[SlotChoice]] = {"merge": MergeChoice}


def _slot_field(spec: SlotSpec) -> Any:
    alias = spec.name if _field(spec.name) != spec.name else None
    choice = _CHOICES.get(spec.name, SlotChoice)
    if spec.required:
        return (choice, Field(..., alias=alias))
    return (choice | None, Field(None, alias=alias))


#: ``slots:`` of a recipe, one field per row of :data:`rsiframe.api.SLOT_TABLE`
Slots = create_model(
    "Slots",
    __base__=_SlotsBase,
    **{_field(n): _slot_field(s) for n, s in SLOT_TABLE.items()},
)


class Budget(_Strict):
    """Limits; ``null`` means unlimited. Checked before every costly action."""

    max_generations: int | None = Field(10, ge=0)
    max_candidates: int | None = Field(None, ge=0)
    max_evaluations: int | None = Field(None, ge=0)
    #: every task a run executes: certified trials (every split and stage, sealed too,
    #: retries too), rollout and validate-minibatch runs
    max_task_runs: int | None = Field(None, ge=0)
    max_wall_seconds: float | None = Field(None, gt=0)
    max_model_tokens: int | None = Field(None, ge=0)
    max_cost: float | None = Field(None, ge=0)


class InformationSpec(_Strict):
    """What operators may see beyond the default view (see rsiframe.api.INFORMATION)."""

    gate_detail: bool = Field(False, description="per-task gate rewards for every slot")


#: the most candidates a run keeps in flight (each holds a work folder, an export and threads)
MAX_CANDIDATES_IN_FLIGHT = 64


class ConcurrencySpec(_Strict):
    """Candidates in flight: ``generational`` is deterministic, ``steady`` is not."""

    candidates: int = Field(
        1, ge=1, le=MAX_CANDIDATES_IN_FLIGHT, description="candidates mutated/evaluated at once"
    )
    mode: Literal["generational", "steady"] = Field(
        "generational",
        description="generational: children proposed from the generation's start state, "
        "gated in order (same result for any K); steady: a new proposal whenever a slot "
        "frees (not deterministic)",
    )


class Recipe(_Strict):
    # a run made with overrides is named for them: sat3-quickstart[select=best]
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\[\]\s]*\])?$")
    description: str = ""
    seed: Path
    tasks: TasksSpec
    surface: SurfaceSpec
    evaluator: EvaluatorSpec
    slots: Slots
    budget: Budget = Field(default_factory=Budget)
    children_per_generation: int = Field(4, ge=1)
    random_seed: int = 0
    information: InformationSpec = Field(default_factory=InformationSpec)
    models: Models = Field(default_factory=dict, description="declared models (issue 13)")
    concurrency: ConcurrencySpec = Field(default_factory=ConcurrencySpec)


# -- methods ------------------------------------------------------------------------------


class MethodEvaluator(_Strict):
    """A method's part of ``evaluator:``: how a child's evaluation is staged. The evaluator
    itself (engine, config, executor) is the target's: a method never changes what a score
    means, so a method's runs compare with the target's own."""

    stages: list[StageSpec] = Field(default_factory=list)


class Method(_Strict):
    """A method file (``kind: method``): only what the method decides, no target in it.

    A run combines a target recipe (seed, tasks, surface, evaluator) with a method:
    ``extends: [target.yaml, methods/gepa.yaml]`` or ``rsiframe run target.yaml --method
    gepa``. The method's ``slots`` replace the target's whole; its other keys merge over
    the target's (a budget the method does not set stays the target's)."""

    kind: Literal["method"]
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = ""
    slots: Slots
    children_per_generation: int | None = Field(None, ge=1)
    #: a method that runs asynchronously says so (ShinkaEvolve: ``mode: steady``)
    concurrency: ConcurrencySpec | None = None
    budget: Budget | None = None
    evaluator: MethodEvaluator | None = None
    models: Models = Field(default_factory=dict)
    information: InformationSpec | None = None


#: the keys a method file may hold
METHOD_KEYS = tuple(Method.model_fields)
