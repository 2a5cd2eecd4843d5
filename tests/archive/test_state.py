"""rsiframe.archive.state: the fold's task-run count over older archives."""

from __future__ import annotations
import json
import os
from pathlib import Path
import pytest
from tests.support.cli import cli, cli_proc, events, status_json
from tests.support.mini import make_mini, AGENT, Mini
from rsiframe.archive.state import RunState
from rsiframe.engine.budget import BudgetGuard, TaskCosts
from rsiframe.recipe.schema import Budget



def test_fold_counts_older_archives_by_finished_tasks() -> None:
    from rsiframe.archive.log import Event

    st = RunState(verifier=None)  # type: ignore[arg-type]
    seq = iter(range(100))

    def ev(type_: str, **data: object) -> Event:
        return Event(seq=next(seq), ts=0.0, type=type_, data=data, prev="", hash="")

    st.apply(ev("candidate_proposed", id="c0000", parent=None, generation=0))
    st.apply(ev("evaluation_started", id="c0000", split="train", attempt=1))  # no tasks
    for t in ("t1", "t2", "t3"):
        st.apply(ev("task_finished", id="c0000", split="train", attempt=1, task=t))
    st.apply(ev("evaluation_started", id="c0000", split="gate", attempt=1, tasks=4))
    st.apply(ev("task_finished", id="c0000", split="gate", attempt=1, task="g1"))
    assert st.task_runs == 3 + 4
