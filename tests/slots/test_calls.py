"""rsiframe.slots.calls: every operator call is attributed, timed and checked: the slot's
result type, a size cap, a per-call RNG; anything else becomes ``OperatorFailed``."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from rsiframe.api import (
    Check,
    NoConfig,
    NoveltyContext,
    NoveltyOperator,
    SelectContext,
    Selection,
    SelectOperator,
)
from rsiframe.repo.candidates import CandidateRepo
from rsiframe.slots import calls as calls_mod
from rsiframe.slots.calls import OperatorCalls, OperatorFailed, Progress, Timings
from rsiframe.slots.runview import StateView
from tests.support.runlog import SEED, SignedRun


class Stages(Progress):
    def __init__(self) -> None:
        self.stages: list[tuple[str, str]] = []

    def stage(self, cid: str, stage: str) -> None:
        self.stages.append((cid, stage))


class Pick(SelectOperator):
    name = "pick"

    def select(self, ctx: SelectContext) -> Selection:
        return Selection(parent=SEED, reason=f"{ctx.rng.random():.6f}")


class Quiet(NoveltyOperator):
    name = "quiet"

    def novelty(self, ctx: NoveltyContext) -> Check:
        return Check(ok=True)


def _calls(run: SignedRun, tmp_path: Path, **kw: Any) -> OperatorCalls:
    view = StateView(run.state, CandidateRepo.create(tmp_path / "repo.git"), run.archive.run_dir)
    ops = {"select": Pick(NoConfig()), "novelty": Quiet(NoConfig())}
    return OperatorCalls(ops, {"select": "pick", "novelty": "quiet"}, view, 7, Timings(), **kw)  # type: ignore[arg-type]


def test_a_call_is_timed_attributed_and_its_result_returned(
    signed_run: SignedRun, tmp_path: Path
) -> None:
    signed_run.seed()
    order: list[str] = []
    seen: list[tuple[str | None, str | None, str | None, int | None]] = []
    progress = Stages()
    calls = _calls(
        signed_run,
        tmp_path,
        progress=progress,
        horizon=lambda cid, slot: 3,
        before_call=lambda: order.append("synced"),
    )

    def select() -> Selection:
        v = calls.view
        seen.append((v.slot, v.operator, v.candidate_id, v.before))
        order.append("called")
        return Selection(parent=SEED)

    assert calls.call("c0001", "select", select) == Selection(parent=SEED)
    assert seen == [("select", "pick", "c0001", 3)] and order == ["synced", "called"]
    assert progress.stages == [("c0001", "select")]
    assert calls.timings.operator["c0001"] > 0
    assert calls.view.slot is None  # attribution ends with the call
    assert calls.op("select").name == "pick" and calls.op("reflect") is None


def test_a_wrong_result_type_an_exception_or_an_oversized_result_fails_the_call(
    signed_run: SignedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    signed_run.seed()
    calls = _calls(signed_run, tmp_path)
    with pytest.raises(OperatorFailed, match="returned Check, expected Selection") as info:
        calls.call("c0001", "select", lambda: Check(ok=True))
    assert info.value.slot == "select" and "TypeError" in info.value.trace

    def boom() -> Selection:
        raise KeyError("parent")

    with pytest.raises(OperatorFailed, match="select operator failed: KeyError: 'parent'"):
        calls.call("c0001", "select", boom)
    monkeypatch.setattr(calls_mod, "MAX_RESULT_BYTES", 100)
    with pytest.raises(OperatorFailed, match="result too large"):
        calls.call("c0001", "select", lambda: Selection(parent=SEED, reason="x" * 200))


def test_each_call_has_its_own_reproducible_rng(signed_run: SignedRun, tmp_path: Path) -> None:
    calls = _calls(signed_run, tmp_path)
    first = [calls.rng("c0001", "select").random() for _ in range(2)]
    assert first[0] == first[1]  # the same (seed, candidate, slot): the same stream
    assert calls.rng("c0002", "select").random() != first[0]
    assert calls.rng("c0001", "mutate").random() != first[0]
    models_seen: list[tuple[str, str]] = []

    def models(cid: str, slot: str, config: Any) -> contextlib.AbstractContextManager[None]:
        models_seen.append((cid, slot))
        return contextlib.nullcontext()

    scoped = _calls(signed_run, tmp_path / "b", models=models)
    scoped.call("c0003", "novelty", lambda: Check(ok=True))
    assert models_seen == [("c0003", "novelty")]
