"""tasks/terminal/fix-script: its check runs the agent's script confined (Landlock), where
it reaches neither the tests nor the reward."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.paths import REPO

# -- tasks/terminal/fix-script: the audit found its check running the agent's script where
# it could write the reward; the script now runs confined ---------------------------------

CONFINE = REPO / "tasks" / "terminal" / "fix-script" / "tests" / "confine.py"


def _confined(tmp_path: Path, tests: Path, script: str) -> subprocess.CompletedProcess[str]:
    verifier = tests.parent / "verifier"
    verifier.mkdir(exist_ok=True)
    (tests / "test.sh").write_text("expected: ok\n")
    app = tmp_path / "app"
    app.mkdir()
    return subprocess.run(
        ["python3", str(CONFINE), str(tests), str(verifier), "--", "sh", "-c", script],
        cwd=app, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_confined_script_runs_but_reaches_neither_tests_nor_reward(tmp_path: Path) -> None:
    outside = Path(tempfile.mkdtemp(dir="/var/tmp"))  # not under /tmp, which it may write
    try:
        tests = outside / "tests"
        tests.mkdir()
        script = f"cat {tests}/test.sh; echo 1 > {outside}/verifier/reward.txt; echo ok"
        res = _confined(tmp_path, tests, script)
        assert res.returncode == 0 and res.stdout == "ok\n", res.stderr
        assert "Permission denied" in res.stderr
        assert not (outside / "verifier" / "reward.txt").exists()
    finally:
        shutil.rmtree(outside)


def test_the_confinement_refuses_where_the_tests_stay_readable(tmp_path: Path) -> None:
    tests = tmp_path / "tests"  # under /tmp, which the script may read and write
    tests.mkdir()
    res = _confined(tmp_path, tests, "echo ok")
    assert res.returncode == 3 and res.stdout == ""
    assert f"it can read {tests}/test.sh" in res.stderr
