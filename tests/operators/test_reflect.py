"""The lessons reflect operator."""

from __future__ import annotations

import random

from rsiframe.api import (
    ReflectContext,
)
from rsiframe.operators.reflect import Lessons, LessonsConfig
from tests.support.runview import FakeRun, cand


def test_lessons_append_one_line_per_child_and_cap() -> None:
    members = [
        cand("k1", "p", "admitted", description="raise x"),
        cand("k2", "p", "declined", description="lower y"),
        cand("k3", "p", "rejected", description="touch z"),
    ]
    run = FakeRun([cand("p"), *members], {"p": 0.5, "k1": 0.75, "k2": 0.25})
    out = (
        Lessons(LessonsConfig(max_lines=3))
        .reflect(ReflectContext(run, random.Random(0), 2, "old line\n", members))
        .lessons
    )
    assert out.splitlines() == [
        "g2 k1 [kept] (+0.250 on gate): raise x",
        "g2 k2 [no better] (-0.250 on gate): lower y",
        "g2 k3 [rejected]: touch z",
    ]
