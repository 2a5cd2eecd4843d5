"""rsiframe.selftest.common: how a scenario judges a command (one line, no traceback, its exit
status); whether a whole run is sound is judged in tests/selftest/test_runner.py."""

from __future__ import annotations

import subprocess

from rsiframe.selftest.common import check_exit, one_line


def _res(code: int, stderr: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["rsiframe"], code, "", stderr)


def test_a_traceback_is_a_problem_naming_where_it_came_from() -> None:
    trace = (
        "Traceback (most recent call last):\n"
        '  File "/x/rsiframe/cli/main.py", line 3, in main\n'
        "KeyError: 'seed'\n"
    )
    assert one_line(_res(1, trace), "resume") == [
        "resume: traceback: KeyError: 'seed' (File \"/x/rsiframe/cli/main.py\", line 3, in main)"
    ]
    assert one_line(_res(2, "rsiframe: error: bad recipe\n"), "run") == []


def test_a_failed_exit_is_a_problem_with_its_last_words() -> None:
    assert check_exit(_res(0, ""), "verify") == ([], True)
    problems, ok = check_exit(_res(2, "rsiframe: error: not a run folder\n"), "verify")
    assert not ok and problems == ["verify exit 2: rsiframe: error: not a run folder"]
