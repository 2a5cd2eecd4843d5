"""Calling operators: one timed, checked call per slot, and where the engine reports progress.

Every operator call goes through :meth:`OperatorCalls.call`: its reads are attributed
to the slot, operator and candidate, its result must be the slot's result type (from
:data:`rsiframe.api.SLOT_TABLE`) and fit :data:`MAX_RESULT_BYTES`, and anything else
becomes :class:`OperatorFailed`.
"""

from __future__ import annotations

import contextlib
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from rsiframe.api import SLOT_TABLE, Operator
from rsiframe.archive.log import Event
from rsiframe.archive.state import RunState
from rsiframe.slots.runview import StateView
from rsiframe.util import faults

R = TypeVar("R", bound=BaseModel)

#: the largest operator result (as JSON) the engine accepts; a bigger one fails the call,
#: so no operator can bloat the archive (results land in events and artifacts)
MAX_RESULT_BYTES = 8 << 20


def _no_models(cid: str, slot: str, config: Any) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


class Progress:
    """Where the engine reports what it is doing; the CLI draws it with Rich."""

    def event(self, ev: Event, state: RunState) -> None: ...

    def stage(self, cid: str, stage: str) -> None: ...

    def tasks(self, cid: str, split: str, done: int, total: int) -> None: ...

    def note(self, message: str) -> None: ...


class OperatorFailed(Exception):
    def __init__(self, slot: str, exc: BaseException) -> None:
        super().__init__(f"{slot} operator failed: {type(exc).__name__}: {exc}")
        self.slot = slot
        self.trace = "".join(traceback.format_exception(exc))


@dataclass
class Timings:
    """Seconds per candidate spent in operators and in task execution (for benchmarks)."""

    operator: dict[str, float] = field(default_factory=dict)
    tasks: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)

    def add(self, table: dict[str, float], cid: str, seconds: float) -> None:
        table[cid] = table.get(cid, 0.0) + seconds


def _live(cid: str, slot: str) -> int | None:
    return None


def _nothing() -> None:
    return None


def _same(cid: str) -> str:
    return cid


class OperatorCalls:
    """The run's operators, one instance per slot, and the one way to call them."""

    def __init__(
        self,
        ops: dict[str, Operator],
        names: dict[str, str],
        view: StateView,
        random_seed: int,
        timings: Timings,
        *,
        progress: Progress | None = None,
        horizon: Callable[[str, str], int | None] | None = None,
        models: Callable[[str, str, Any], contextlib.AbstractContextManager[Any]] | None = None,
        before_call: Callable[[], None] | None = None,
        draws: Callable[[str], str] | None = None,
    ) -> None:
        """``horizon``: (candidate, slot) -> the generation whose start state the call sees
        (None: live); ``models``: (candidate, slot, operator config) -> the call's models
        (``llm.use`` around it; :meth:`rsiframe.gateway.runmodels.RunModels.scope`), none
        for a run without models; ``before_call``: runs before every call (the engine: the
        writer's events are made durable first); ``draws``: candidate -> the candidate whose
        RNG it draws from (a retaken proposal repeats the one a kill cut)."""
        self.ops = ops
        self.names = names  # slot -> the operator as the recipe names it
        self.view = view
        self.random_seed = random_seed
        self.timings = timings
        self.progress = progress or Progress()
        self.horizon = horizon or _live
        self.models = models or _no_models
        self.before_call = before_call or _nothing
        self.draws = draws or _same

    def op(self, slot: str) -> Any:
        """The operator filling ``slot`` (None for an empty optional slot)."""
        return self.ops.get(slot)

    def rng(self, cid: str, slot: str) -> random.Random:
        """The RNG of one call: seeded by the recipe, the candidate (or generation) and slot."""
        return random.Random(f"{self.random_seed}:{self.draws(cid)}:{slot}")

    def call(self, cid: str, slot: str, fn: Callable[[], R]) -> R:
        """Run one operator call, timed; its exceptions and bad results become OperatorFailed."""
        expect = SLOT_TABLE[slot].result
        faults.reached("stage:" + slot)
        self.before_call()
        self.progress.stage(cid, slot)
        start = time.perf_counter()
        try:
            grants: frozenset[str] = getattr(self.ops.get(slot), "grants", frozenset())
            before = self.horizon(cid, slot)
            config = getattr(self.ops.get(slot), "config", None)
            with (
                self.view.calling(slot, self.names.get(slot, ""), cid, grants, before),
                self.models(cid, slot, config),
            ):
                result = fn()
            if not isinstance(result, expect):
                raise TypeError(f"returned {type(result).__name__}, expected {expect.__name__}")
            size = len(result.model_dump_json())
            if size > MAX_RESULT_BYTES:
                raise ValueError(f"result too large: {size} bytes (limit {MAX_RESULT_BYTES})")
            return result
        except Exception as exc:
            raise OperatorFailed(slot, exc) from exc
        finally:
            self.timings.add(self.timings.operator, cid, time.perf_counter() - start)
