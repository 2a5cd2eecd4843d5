"""The tree_dedup novelty operator."""

from __future__ import annotations

import random

from rsiframe.api import (
    NoConfig,
    NoveltyContext,
)
from rsiframe.operators.novelty import TreeDedup
from tests.support.runview import POP, SCORES, FakeRun, cand

# -- novelty, gate, record, reflect ---------------------------------------------------------


def test_tree_dedup() -> None:
    run = FakeRun(POP, SCORES)
    nctx = NoveltyContext(run, random.Random(0), 1, "c9", cand("c0"), "c2", [])
    check = TreeDedup(NoConfig()).novelty(nctx)
    assert not check.ok and "c2" in check.reason
    assert (
        TreeDedup(NoConfig())
        .novelty(NoveltyContext(run, random.Random(0), 1, "c9", cand("c0"), "fresh", []))
        .ok
    )
