"""Gate operators: improves_parent, threshold, always; a gate without a verified score."""

from __future__ import annotations

import random

import pytest

from rsiframe.api import (
    GateContext,
    NoConfig,
)
from rsiframe.operators.gate import (
    Always,
    ImprovesParent,
    ImprovesParentConfig,
    Threshold,
    ThresholdConfig,
)
from tests.support.runview import FakeRun, cand


def gctx(child: float, parent: float) -> GateContext:
    run = FakeRun([cand("p"), cand("k", "p", state="certified")], {"p": parent, "k": child})
    return GateContext(run, random.Random(0), 1, cand("k", "p"), cand("p"))


def test_improves_parent_is_strict_with_min_delta() -> None:
    assert ImprovesParent(ImprovesParentConfig()).gate(gctx(0.5, 0.4)).admit
    assert not ImprovesParent(ImprovesParentConfig()).gate(gctx(0.4, 0.4)).admit
    assert not ImprovesParent(ImprovesParentConfig(min_delta=0.2)).gate(gctx(0.5, 0.4)).admit
    assert "+0.100" in ImprovesParent(ImprovesParentConfig()).gate(gctx(0.5, 0.4)).reason


def test_threshold_and_always() -> None:
    assert Threshold(ThresholdConfig(min_score=0.5)).gate(gctx(0.5, 0.9)).admit
    assert not Threshold(ThresholdConfig(min_score=0.5)).gate(gctx(0.49, 0.0)).admit
    assert Always(NoConfig()).gate(gctx(0.0, 1.0)).admit


def test_gate_without_a_verified_score_raises() -> None:
    run = FakeRun([cand("p"), cand("k", "p")], {"p": 0.1})
    with pytest.raises(ValueError, match="no verified gate score"):
        ImprovesParent(ImprovesParentConfig()).gate(
            GateContext(run, random.Random(0), 1, cand("k", "p"), cand("p"))
        )
