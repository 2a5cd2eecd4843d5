"""The public operator API: one abstract class per slot, typed results, read-only contexts.

Built-in operators (``rsiframe.operators``) use exactly this API, as does a
researcher's own operator found by entry point, ``module:Class`` or
``path/to/file.py:Class``. Operators read the run only through a
:class:`RunView`; they return results and never write the archive.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field


class ProposalSkipped(Exception):
    """An operator declines to make this child, by its method's rule (e.g. GEPA skips a
    parent that is already perfect on the reflection's minibatch). The child ends
    ``rejected`` at the operator's slot with this reason, as a skipped proposal, not as a
    failure (no traceback)."""


class SearchConverged(Exception):
    """A select operator declares the search converged by its method's rule (A-Evolve's
    convergence stop): the run ends ``finished`` with this reason, no child proposed."""


class InformationFlowError(Exception):
    """An operator asked for something its slot may not see (sealed scores, gate detail).

    The engine also records every such attempt as a signed
    ``information_flow_violation`` event, shown by ``rsiframe status``.
    """


# -- information flow ----------------------------------------------------------------

#: Everything an operator can ask its :class:`RunView` for, as ``kind`` or ``kind:split``.
READS = (
    "candidates",  # candidates, candidate, admitted, lineage, trees
    "files",  # read_file: committed trees of candidates
    "lessons",
    "scores:train",
    "scores:gate",
    "scores:sealed",
    "rewards:train",
    "rewards:gate",
    "rewards:sealed",
    "trajectories:train",
    "trajectories:gate",
    "trajectories:sealed",
    "artifacts",  # train evidence, rollouts, analyses, lessons: never gate or sealed evidence
)
_COMMON = frozenset(
    {
        "candidates",
        "files",
        "lessons",
        "scores:train",
        "scores:gate",
        "rewards:train",
        "trajectories:train",
        "artifacts",
    }
)
#: what ``information.gate_detail: true`` adds for every slot
GATE_DETAIL = frozenset({"rewards:gate"})
#: re-proposals the engine allows one child (``Check.retry`` from novelty), whatever the
#: operator asks: a novelty operator cannot keep a child's mutation going forever
MAX_REPROPOSALS = 10


def may_read(
    slot: str | None,
    what: str,
    *,
    gate_detail: bool = False,
    grants: frozenset[str] = frozenset(),
) -> bool:
    """Whether ``slot`` (None: the engine's own view for tests) may read ``what``.

    ``grants`` are the calling operator's declared grants; only those its slot's
    ``grantable`` column allows count.
    """
    kind, sep, split = what.partition(":")
    if sep:  # a stage of a split (``train@1``) reads as its split
        what = f"{kind}:{split.split('@', 1)[0]}"
    if what.endswith(":sealed"):
        return False
    spec = SLOT_TABLE.get(slot or "")
    allowed = spec.reads if spec is not None else _COMMON
    granted = spec is not None and what in grants and what in spec.grantable
    return what in allowed or granted or (gate_detail and what in GATE_DETAIL)


# -- results -------------------------------------------------------------------------


class Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Usage(Result):
    """Model tokens and cost an operator spent (counted against the budget)."""

    tokens: int = Field(0, ge=0)
    cost: float = Field(0.0, ge=0)


class Selection(Result):
    parent: str
    reason: str = ""
    #: where the child is placed in a structured archive (an island, a MAP-Elites cell);
    #: recorded in the proposal event and shown to operators as ``CandidateView.placement``
    placement: dict[str, Any] = {}


class MergePlan(Result):
    """A merge operator's plan: the second parent, and how conflicting files are resolved.

    ``partner`` None: no suitable partner, the proposal is a mutation after all.
    ``prefer`` resolves every conflicting surface file to one side; ``files`` overrides it
    per file (glob -> side).
    """

    partner: str | None
    prefer: Literal["first", "second"] = "first"
    files: dict[str, Literal["first", "second"]] = {}
    reason: str = ""
    #: the common ancestor to merge against (None: the nearest one); GEPA chooses it
    base: str | None = None
    #: ``line``: a file changed on both sides is merged line by line (conflicts by side);
    #: ``file``: it is taken whole from its side (GEPA's components are whole files)
    granularity: Literal["line", "file"] = "line"


class Rollout(Result):
    """Train-split trajectories of the parent (summaries; full logs are artifacts)."""

    trajectories: list[dict[str, Any]]
    reused: bool = False


class Analysis(Result):
    summary: str
    details: dict[str, Any] = {}


class SandboxUse(Result):
    """How an operator's command or code was confined (recorded in the mutation event)."""

    isolation: str  # bwrap | process
    requested: str  # bwrap | auto | process
    network: list[str] = []  # allow-listed endpoints; empty: no network
    memory_mb: int | None = None
    timeout_s: float | None = None
    passed_env: list[str] = []  # host variables passed in by name (values never recorded)


class Mutation(Result):
    description: str
    details: dict[str, Any] = {}
    usage: Usage = Usage()
    sandbox: SandboxUse | None = None


class Check(Result):
    """Outcome of validate and novelty: ``ok`` false rejects the candidate."""

    ok: bool
    reason: str = ""
    output: str = ""
    sandbox: SandboxUse | None = None
    #: novelty only: with ``ok`` false, ask the mutator again for this child instead of
    #: rejecting it (ShinkaEvolve's rejection sampling); the engine allows at most
    #: ``MAX_REPROPOSALS`` per child, then rejects it
    retry: bool = False


class GateDecision(Result):
    admit: bool
    reason: str


class Notes(Result):
    notes: dict[str, Any]


class Reflection(Result):
    lessons: str


# -- read-only views -----------------------------------------------------------------


@dataclass(frozen=True)
class CandidateView:
    id: str
    parent: str | None
    generation: int
    state: str
    commit: str | None
    tree: str | None
    description: str = ""
    #: the placement its proposal recorded (``Selection.placement``), e.g. its island
    placement: dict[str, Any] = field(default_factory=dict)
    #: every parent, ``parent`` first: two for a merge, none for the seed
    parents: tuple[str, ...] = ()
    #: the digest of the analysis its mutation was made from (``run.artifact`` reads it)
    analysis: str | None = None
    #: the evaluation stage a staged evaluation stopped it at (``train@1``): rejected there,
    #: or admitted with that stage's score (``on_fail: archive``, DGM); its score is
    #: ``run.score(id, stopped_at)``
    stopped_at: str | None = None
    #: the digest of its mutate operator's result (``Mutation``: description and details,
    #: e.g. the change manifest an editor declared with its edit; ``run.artifact`` reads it)
    mutation: str | None = None


class RunView(Protocol):
    """What every operator may read of the run. Sealed results are never reachable."""

    @property
    def lessons(self) -> str: ...

    def candidates(self) -> list[CandidateView]: ...

    def candidate(self, cid: str) -> CandidateView: ...

    def admitted(self) -> list[CandidateView]: ...

    def lineage(self, cid: str) -> list[CandidateView]:
        """The candidate and its ancestors, newest first."""
        ...

    def score(self, cid: str, split: str) -> float | None:
        """Verified aggregate score on ``train`` or ``gate`` (or a stage of one, e.g.
        ``train@1``); sealed raises."""
        ...

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        """Verified per-task rewards; train only unless the recipe opens gate detail."""
        ...

    def trajectories(self, cid: str, split: str = "train") -> list[dict[str, Any]]:
        """Certified train trajectories (summaries with artifact refs); other splits raise."""
        ...

    def artifact(self, digest: str) -> bytes:
        """An artifact reachable from what the view shows (train evidence, rollouts, lessons)."""
        ...

    def read_file(self, cid: str, path: str) -> bytes:
        """A file from the candidate's committed tree."""
        ...

    def trees(self) -> AbstractSet[str]:
        """Tree hashes of every committed candidate (for novelty)."""
        ...


@dataclass(frozen=True)
class Context:
    run: RunView
    rng: random.Random
    generation: int


@dataclass(frozen=True)
class SelectContext(Context):
    #: the id the proposed child will get (policies that place children by number use it)
    candidate_id: str = ""


@dataclass(frozen=True)
class MergeContext(Context):
    candidate_id: str
    #: the parent select chose; the plan names the second parent
    first: CandidateView


@dataclass(frozen=True)
class RolloutContext(Context):
    parent: CandidateView
    #: runs the parent on train tasks (all, or the given ids); uncertified, for operators
    run_train: Callable[[list[str] | None], list[dict[str, Any]]]
    train_tasks: list[str]
    #: each train task's instruction (what its agent is told), by task id
    instructions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AnalyzeContext(Context):
    parent: CandidateView
    rollout: Rollout


@dataclass(frozen=True)
class MutateContext(Context):
    candidate_id: str
    parent: CandidateView
    workdir: Path
    rollout: Rollout
    analysis: Analysis | None
    lessons: str
    surface_include: tuple[str, ...]
    surface_exclude: tuple[str, ...]
    #: the placement select recorded for this child (``Selection.placement``): the child is
    #: of the current generation, which the run view hides from this call
    placement: dict[str, Any] = field(default_factory=dict)
    #: why the novelty slot sent this child's earlier proposals back (oldest first); empty
    #: for a first proposal. A model mutator shows them, so it is not asked the same again
    rejected_as_similar: tuple[str, ...] = ()

    def may_change(self, path: str) -> bool:
        """True when the surface allows changing ``path`` (the guardrail's own rule)."""
        from rsiframe.surface import Surface  # staged beside this file for candidate operators

        return Surface(self.surface_include, self.surface_exclude).allows(path)


@dataclass(frozen=True)
class ValidateContext(Context):
    candidate_id: str
    parent: CandidateView
    workdir: Path
    changes: list[dict[str, Any]]
    #: runs the WORK TREE (sandboxed, uncertified) on the given train task ids, like
    #: rollout's ``run_train`` does for the parent; None where the framework offers none
    run_train: Callable[[list[str]], list[dict[str, Any]]] | None = None
    train_tasks: list[str] = field(default_factory=list)
    #: the rollout the mutation was made from (None for a merge): GEPA accepts a child on
    #: exactly the tasks its reflection saw, against the parent's rewards there
    rollout: Rollout | None = None
    #: a merge's second parent (None for a mutation)
    merged_with: CandidateView | None = None


@dataclass(frozen=True)
class NoveltyContext(Context):
    candidate_id: str
    parent: CandidateView
    tree: str
    changes: list[dict[str, Any]]
    #: how many times this child was already re-proposed (``Check.retry``)
    attempt: int = 0
    #: the child's work tree (its files as they will be committed; read only)
    workdir: Path | None = None


@dataclass(frozen=True)
class GateContext(Context):
    candidate: CandidateView
    parent: CandidateView


@dataclass(frozen=True)
class RecordContext(Context):
    candidate: CandidateView
    parent: CandidateView | None
    decision: GateDecision
    changes: list[dict[str, Any]]


@dataclass(frozen=True)
class ReflectContext(Context):
    previous: str
    members: list[CandidateView] = field(default_factory=list)


# -- operator classes ----------------------------------------------------------------


class NoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class RunStart:
    """What an operator may check its config against as a run begins (before any call)."""

    #: tasks per split: ``{"train": 24, "gate": 24, "sealed": 12}``
    splits: dict[str, int]
    #: a file of the seed, by its path in the candidate (None: the seed has no such file)
    seed_file: Callable[[str], bytes | None]
    #: whether the recipe's surface lets a mutation change a path
    may_change: Callable[[str], bool]


class Operator:
    """Base of every operator. Subclasses set ``name`` and, if configurable, ``Config``."""

    slot: ClassVar[str] = ""
    name: ClassVar[str] = ""
    Config: ClassVar[type[BaseModel]] = NoConfig
    #: reads beyond the slot's view this operator declares (allowed only where the slot's
    #: :data:`GRANTABLE` entry lists them; checked when the operator is loaded)
    grants: ClassVar[frozenset[str]] = frozenset()
    #: True: no call ever draws from ``ctx.rng``, whatever the config (see :meth:`draws`)
    deterministic: ClassVar[bool] = False

    def __init__(self, config: BaseModel) -> None:
        self.config = config

    def max_task_runs(self, train: int) -> int:
        """The most tasks one call may run through ``run_train`` (rollout, validate), so
        ``budget.max_task_runs`` keeps room for them before a child is proposed; ``train``:
        the train split's size. A run beyond what is left is refused all the same."""
        return train

    def draws(self, start: RunStart) -> bool:
        """Whether a call's outcome in this run can depend on ``ctx.rng`` (the call's random
        generator, seeded by the recipe's ``random_seed``). Say False only when the config
        forces every choice: a run whose operators all do gets a warning at start that its
        seeds cannot differ. By default: unless the class is ``deterministic``."""
        return not self.deterministic

    def start_warnings(self, start: RunStart) -> list[str]:
        """Config that is valid but likely not meant for this run (one line each, e.g. a
        sample as large as what it samples); shown as the run starts and kept in its
        ``run_started`` event."""
        return []


class SelectOperator(Operator):
    slot = "select"

    def select(self, ctx: SelectContext) -> Selection:
        raise NotImplementedError


class MergeOperator(Operator):
    """Plans a merge of two admitted candidates; the framework does the 3-way merge.

    Hook (issue 13): when a model is declared, a merge operator will also be handed the
    conflicting hunks to resolve; today conflicts are resolved by the plan's sides.
    """

    slot = "merge"

    def merge(self, ctx: MergeContext) -> MergePlan:
        raise NotImplementedError


class RolloutOperator(Operator):
    slot = "rollout"

    def rollout(self, ctx: RolloutContext) -> Rollout:
        raise NotImplementedError


class AnalyzeOperator(Operator):
    slot = "analyze"

    def analyze(self, ctx: AnalyzeContext) -> Analysis:
        raise NotImplementedError


class MutateOperator(Operator):
    slot = "mutate"

    def mutate(self, ctx: MutateContext) -> Mutation:
        raise NotImplementedError


class ValidateOperator(Operator):
    slot = "validate"

    def validate(self, ctx: ValidateContext) -> Check:
        raise NotImplementedError


class NoveltyOperator(Operator):
    slot = "novelty"

    def novelty(self, ctx: NoveltyContext) -> Check:
        raise NotImplementedError


class GateOperator(Operator):
    slot = "gate"

    def gate(self, ctx: GateContext) -> GateDecision:
        raise NotImplementedError


class RecordOperator(Operator):
    slot = "record"

    def record(self, ctx: RecordContext) -> Notes:
        raise NotImplementedError


class ReflectOperator(Operator):
    slot = "reflect"

    def reflect(self, ctx: ReflectContext) -> Reflection:
        raise NotImplementedError


# -- the slot table --------------------------------------------------------------------


@dataclass(frozen=True)
class SlotSpec:
    """One lifecycle slot: everything the framework knows about it, in one row."""

    name: str  # also the method the engine calls on its operator
    base: type[Operator]  # the class an operator for this slot subclasses
    context: type[Context]  # what that method receives (built by field for untrusted ones)
    result: type[Result]  # what that method returns
    required: bool  # a recipe must fill it
    #: what the slot's operators may read through their :class:`RunView` (``READS``);
    #: per-task gate rewards only with ``information: {gate_detail: true}``; sealed never
    reads: frozenset[str]
    candidate_code: bool = False  # a candidate's own code may fill it (``candidate:``)
    #: reads beyond ``reads`` an operator of this slot may declare for itself
    #: (``Operator.grants``, checked when it is loaded); never sealed results
    grantable: frozenset[str] = frozenset()
    #: called inside a child's mutation transaction: in generational mode its reads see
    #: the state as the child's generation began
    in_transaction: bool = False
    #: its context has ``run_train``: uncertified task runs, charged to ``max_task_runs``
    runs_tasks: bool = False
    #: it changes the child's work folder (a candidate's own operator gets it writable)
    writes_work: bool = False

    @property
    def method(self) -> str:
        return self.name


# the columns a row sets beyond the positional ones (read them in SlotSpec above)
_TX: dict[str, Any] = {"in_transaction": True}
_TX_RUNS: dict[str, Any] = {**_TX, "runs_tasks": True}
_TX_WRITES: dict[str, Any] = {**_TX, "writes_work": True}
#: Every slot, in lifecycle order. The one source: the recipe schema, the registry, the
#: engine, the untrusted-operator contract and the viewer all read this table.
SLOT_TABLE: dict[str, SlotSpec] = {
    s.name: s
    for s in (
        SlotSpec("select", SelectOperator, SelectContext, Selection, True, _COMMON, **_TX),
        SlotSpec("merge", MergeOperator, MergeContext, MergePlan, False, _COMMON, **_TX),
        SlotSpec("rollout", RolloutOperator, RolloutContext, Rollout, True, _COMMON, **_TX_RUNS),
        SlotSpec("analyze", AnalyzeOperator, AnalyzeContext, Analysis, False, _COMMON, True, **_TX),
        SlotSpec(
            "mutate", MutateOperator, MutateContext, Mutation, True, _COMMON, True, **_TX_WRITES
        ),
        SlotSpec(
            "validate", ValidateOperator, ValidateContext, Check, False, _COMMON, True, **_TX_RUNS
        ),
        SlotSpec("novelty", NoveltyOperator, NoveltyContext, Check, False, _COMMON, True, **_TX),
        # a statistical gate may declare the grant to compare per-task gate rewards
        SlotSpec(
            "gate", GateOperator, GateContext, GateDecision, True, _COMMON, False, GATE_DETAIL
        ),
        SlotSpec("record", RecordOperator, RecordContext, Notes, True, _COMMON),
        SlotSpec("reflect", ReflectOperator, ReflectContext, Reflection, False, _COMMON),
    )
}
# views of the table (not copies): names in order, required first for recipe checks
SLOTS: tuple[str, ...] = tuple(SLOT_TABLE)
REQUIRED_SLOTS = tuple(n for n, s in SLOT_TABLE.items() if s.required)
OPTIONAL_SLOTS = tuple(n for n, s in SLOT_TABLE.items() if not s.required)
SLOT_BASES: dict[str, type[Operator]] = {n: s.base for n, s in SLOT_TABLE.items()}
INFORMATION: dict[str, frozenset[str]] = {n: s.reads for n, s in SLOT_TABLE.items()}
