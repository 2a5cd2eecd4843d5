"""rsiframe.engine.budget: the guard keeps room for a child's worst case and the sealed
anchor."""

from __future__ import annotations

import json

from rsiframe.archive.state import RunState
from rsiframe.engine.budget import BudgetGuard, TaskCosts
from rsiframe.recipe.schema import Budget


def test_the_guard_keeps_room_for_a_childs_worst_case_and_the_sealed_anchor() -> None:
    costs = TaskCosts({"train": 4, "gate": 4}, ("train", "gate"), uncertified=3, sealed=2)
    guard = BudgetGuard(Budget(max_task_runs=30), costs=costs)
    st = RunState(verifier=None)  # type: ignore[arg-type]
    st.task_runs = 30 - 11 - 2  # exactly one child (3 + 8) and the anchor (2) fit
    assert guard.refuse_candidate(st) is None
    st.task_runs += 1
    assert guard.refuse_candidate(st) == "task runs would exceed 30"
    # a child's evaluation may not eat the anchor's room; the anchor may
    assert guard.refuse_evaluation(st, tasks=4) is None
    st.task_runs = 26
    assert guard.refuse_evaluation(st, tasks=4) == "task runs would exceed 30"
    assert guard.refuse_evaluation(st, tasks=4, reserved=True) is None
    assert guard.refuse_task_runs(st, 2) is None  # the anchor's 2 stay free
    assert guard.refuse_task_runs(st, 3) == "task runs would exceed 30 (26 used, 3 more asked)"
    assert guard.refuse_task_runs(st, 2, unfolded=1) is not None  # charged, not yet folded
    assert guard.report(st)["used"]["task_runs"] == 26
    assert json.dumps(guard.limits())  # plain data for status --json
