"""Statistical acceptance (paired_test) on synthetic run views: the sign test, the paired
bootstrap, and gate detail read only through its declared grant."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from rsiframe.api import GateContext, may_read
from rsiframe.errors import OperatorNotFound
from rsiframe.operators.acceptance import (
    PairedTest,
    PairedTestConfig,
    paired_bootstrap_p,
    sign_test_p,
)
from rsiframe.operators.dgm import (
    KeepAll,
)
from rsiframe.slots.registry import resolve
from tests.support.methodview import Run, view

# -- paired_test -------------------------------------------------------------------------


def test_sign_test_matches_the_binomial_tail() -> None:
    assert sign_test_p([1, 1, 1, 1, 1]) == pytest.approx(1 / 32)
    assert sign_test_p([1, 1, -1, 0, 0]) == pytest.approx(0.5)  # ties drop out: P(X>=2 | 3)
    assert sign_test_p([0, 0]) == 1.0
    for wins, n in itertools.product(range(6), range(1, 6)):
        if wins > n:
            continue
        diffs = [1.0] * wins + [-1.0] * (n - wins)
        want = sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n
        assert sign_test_p(diffs) == pytest.approx(want)


def test_paired_bootstrap_p_is_small_for_a_clear_gain_and_large_for_none() -> None:
    assert paired_bootstrap_p([0.5] * 10, random.Random(0), 500) == 0.0
    assert paired_bootstrap_p([0.0] * 10, random.Random(0), 500) == 1.0
    mixed = paired_bootstrap_p([0.1, -0.1] * 10, random.Random(0), 2000)
    assert 0.3 < mixed < 0.8


def gctx(child: dict[str, float], parent: dict[str, float], open_: bool = True) -> GateContext:
    run = Run(
        [view("p"), view("k", "p")],
        {"p": 0.0, "k": 0.0},
        gate_rewards={"p": parent, "k": child},
        gate_detail_open=open_,
    )
    return GateContext(run, random.Random(0), 1, view("k", "p"), view("p"))


def test_paired_test_declines_a_one_item_gain_and_admits_a_consistent_one() -> None:
    tasks = [f"t{i}" for i in range(12)]
    parent = dict.fromkeys(tasks, 0.5)
    noise = {**parent, "t0": 0.55}  # +0.004 on average: noise
    clear = {t: 0.7 for t in tasks}
    op = PairedTest(PairedTestConfig())
    assert not op.gate(gctx(noise, parent)).admit
    decision = op.gate(gctx(clear, parent))
    assert decision.admit and "12 wins" in decision.reason
    boot = PairedTest(PairedTestConfig(test="bootstrap"))
    assert boot.gate(gctx(clear, parent)).admit and not boot.gate(gctx(noise, parent)).admit
    strict = PairedTest(PairedTestConfig(min_delta=0.5))
    assert not strict.gate(gctx(clear, parent)).admit


def test_paired_test_reads_gate_detail_only_through_its_declared_grant() -> None:
    assert PairedTest.grants == frozenset({"rewards:gate"})
    assert may_read("gate", "rewards:gate", grants=PairedTest.grants)
    assert not may_read("gate", "rewards:gate")
    assert not may_read("select", "rewards:gate", grants=PairedTest.grants)  # gate-only
    assert not may_read("gate", "rewards:sealed", grants=frozenset({"rewards:sealed"}))
    assert resolve("gate", "paired_test") is PairedTest


def test_an_operator_declaring_a_grant_its_slot_lacks_is_refused() -> None:
    class Greedy(KeepAll):
        grants = frozenset({"rewards:sealed"})

    import sys
    import types

    mod = types.ModuleType("greedy_gate_mod")
    mod.Greedy = Greedy  # type: ignore[attr-defined]
    sys.modules["greedy_gate_mod"] = mod
    try:
        with pytest.raises(OperatorNotFound, match="rewards:sealed"):
            resolve("gate", "greedy_gate_mod:Greedy")
    finally:
        del sys.modules["greedy_gate_mod"]
