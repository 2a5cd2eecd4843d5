"""The crash scenarios' kill points: a draw past what the run reached is drawn again."""

from __future__ import annotations

import random
from pathlib import Path

from rsiframe.selftest.common import KILLED
from rsiframe.selftest.experiment import build
from rsiframe.selftest.scenarios import CRASH_RUN, _crash

#: an experiment seed whose knobs mutator proposes three duplicate children: its run makes
#: five certificates, not the six or more most seeds make (CI failed on it at stop 36)
FEW_CERTIFICATES = 25


def test_a_kill_point_past_the_runs_last_certificate_is_drawn_among_those_it_made(
    tmp_path: Path,
) -> None:
    exp = build(tmp_path / "exp", seed=FEW_CERTIFICATES, **CRASH_RUN)
    fault, code = _crash(exp, "kill:after:evaluation_certified:6", random.Random(1))
    assert code == KILLED
    head, _, n = fault.rpartition(":")
    assert head == "kill:after:evaluation_certified" and 1 <= int(n) <= 5


def test_a_point_the_run_never_reaches_is_still_a_fault_that_never_fired(tmp_path: Path) -> None:
    exp = build(tmp_path / "exp", seed=FEW_CERTIFICATES, **CRASH_RUN)
    fault, code = _crash(exp, "kill:after:no_such_event:1", random.Random(1))
    assert (fault, code) == ("kill:after:no_such_event:1", 0)
