"""rsiframe.viewer.fmt: the budget line shows task runs."""

from __future__ import annotations


def test_the_viewer_budget_line_shows_task_runs() -> None:
    from viewer.fmt import budget_line

    line = budget_line({"used": {"evaluations": 6, "task_runs": 152}, "limits": {"task_runs": 200}})
    assert line == "evals 6 · task runs 152/200"
