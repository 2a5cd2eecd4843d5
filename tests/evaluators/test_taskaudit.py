"""`rsiframe tasks audit`: the reward-hack battery finds each fixture's hack, and only it.

The fixtures (tests/corpus/tasksets/audit, written by its generate.py) are small tasks, each
open to exactly one hack; pyfix-vulnerable/tasks/pyfix-001 is a kept copy of the pyfix
verifier that imported the agent's code beside its answers. The slow tests (e2e) audit them
together with one shipped task of each set, on the local engine and the Harbor engine, in
one audit.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.cli import cli
from tests.support.paths import AUDIT_FIXTURES

# -- the command -------------------------------------------------------------------------


def test_a_bad_path_task_or_hack_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, fragment in (
        ((str(tmp_path / "nope"),), "no such folder"),
        ((str(tmp_path),), "no task here"),
        ((str(AUDIT_FIXTURES), "--tasks", "nope"), "no such task: nope"),
        ((str(AUDIT_FIXTURES), "--hack", "nope"), "no such hack: nope"),
    ):
        res = cli("tasks", "audit", *args)
        assert res.exit_code == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and fragment in res.stderr
        assert "Traceback" not in res.stderr


def test_tasks_check_hints_at_the_audit(tmp_path: Path) -> None:
    shutil.copytree(AUDIT_FIXTURES / "clean", tmp_path / "set" / "clean")
    res = cli("tasks", "check", str(tmp_path / "set"))
    assert res.exit_code == 0, res.stdout + res.stderr
    hints = [x for x in res.stderr.splitlines() if x.startswith("hint:")]
    assert hints == [f"hint: `rsiframe tasks audit {tmp_path / 'set'}` attacks each task as a "
                     "reward-hacking agent would"]  # fmt: skip
