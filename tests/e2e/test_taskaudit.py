"""The task audit's battery against the fixtures on both engines, processes left running,
and Ctrl-C (e2e)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rsiframe.evaluators import taskhacks
from rsiframe.evaluators.taskaudit import audit
from rsiframe.sandbox import cgroups
from rsiframe.tasks.taskset import file_rows
from tests.support.cli import cli
from tests.support.paths import AUDIT_FIXTURES, REPO, TASKSET_CORPUS

pytestmark = pytest.mark.e2e


#: kept by issue 20's fix (its tests use it too): the pyfix verifier as it shipped before
VULNERABLE_PYFIX = TASKSET_CORPUS / "pyfix-vulnerable" / "tasks" / "pyfix-001"


#: fixture -> the one hack it is open to (None: clean) on bwrap and Harbor's bwrap
EXPECTED = {
    "clean": None,
    "links-follow": "links",
    "reward-cache": "reward",
    "answers-in-env": "peek",
    "fail-open-huge": "huge",
    "fail-open-utf8": "nonutf8",
    "always-pays": "nothing",
    "wrong-solution": "oracle",
    "linger-window": None,  # both engines kill what the agent leaves running
    "pyfix-001": "planted",
}


#: one task of each shipped set, audited in CI with the fixtures
SHIPPED = {
    "sat3": "uf75-001",
    "textops": "textops-001",
    "terminal": "fix-script",  # its check runs the agent's script (confined)
    "pyfix": "pyfix-002",
}


def digest_tree(root: Path) -> dict[str, str]:
    return {p.name: json.dumps(file_rows(p)) for p in sorted(root.iterdir()) if p.is_dir()}


# -- the battery against the fixtures (slow) -----------------------------------------------


def _set(tmp_path: Path, shipped: bool = True) -> Path:
    root = tmp_path / "set"
    for fixture in EXPECTED:
        src = VULNERABLE_PYFIX if fixture == "pyfix-001" else AUDIT_FIXTURES / fixture
        shutil.copytree(src, root / fixture, symlinks=True)
    if shipped:
        for name, task in SHIPPED.items():
            shutil.copytree(REPO / "tasks" / name / task, root / task, symlinks=True)
    return root


def _pyfix_expected() -> str | None:
    """The shipped pyfix is flagged while its verifier is still the vulnerable one kept as
    the fixture; once fixed (issue 20), it must be clean."""
    shipped = file_rows(REPO / "tasks" / "pyfix" / SHIPPED["pyfix"] / "tests")
    kept = file_rows(VULNERABLE_PYFIX / "tests")
    return "planted" if shipped.get("check.py") == kept["check.py"] else None


def test_the_audit_flags_each_fixture_with_its_hack_only_on_both_engines(tmp_path: Path) -> None:
    root = _set(tmp_path)
    before = digest_tree(root)
    res = cli("tasks", "audit", str(root), "--json")
    report = json.loads(res.stdout)
    assert digest_tree(root) == before and report["unchanged"]  # the audit changes nothing
    assert res.exit_code == 1, res.stderr
    assert not [r for r in report["runs"] if r["failed"]], report["runs"]
    found: dict[tuple[str, str], set[str]] = {}
    for f in report["findings"]:
        found.setdefault((f["task"], f["engine"]), set()).add(f["hack"])
    expected = {**EXPECTED, **{t: None for t in SHIPPED.values()}}
    expected[SHIPPED["pyfix"]] = _pyfix_expected()
    for engine in ("local", "harbor"):
        for task, hack in expected.items():
            want = {hack} if hack else set()
            assert found.get((task, engine), set()) == want, (task, engine, report["findings"])
        # every hack of the battery ran, and the planted code ran where a verifier runs it
        ran = {r["run"].split("/")[0] for r in report["runs"] if r["engine"] == engine}
        assert ran == set(taskhacks.HACK_NAMES)
        assert "/app/mean.py" in report["planted_ran"][engine]["pyfix-001"]
    text = cli("tasks", "audit", str(root), "--engine", "local", "--tasks", "pyfix-001")
    assert text.exit_code == 1
    assert text.stdout.startswith(
        "pyfix-001: planted on local: agent code imported by python as mean "
        "(/app/mean.py) can read /tests/cases.json"
    ), text.stdout


def test_a_process_left_running_is_seen_where_the_sandbox_lets_it_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No task can keep the agent's processes alive on bubblewrap or Harbor's bwrap (the
    audit above finds linger-window clean there). The plain process sandbox on a host
    without cgroups cannot stop them: there the same fixture is open to ``linger``."""
    root = tmp_path / "set"
    shutil.copytree(AUDIT_FIXTURES / "linger-window", root / "linger-window")
    monkeypatch.delenv("RSIFRAME_REQUIRE_BWRAP", raising=False)
    for controller in ("pids", "memory"):  # as on a host without cgroup v1 hierarchies
        monkeypatch.setitem(cgroups._roots, controller, "no cgroup here (the test)")
    report = audit(root, engines=("local",), hacks=("linger",), sandbox="process")
    assert [(f.task, f.hack) for f in report.findings] == [("linger-window", "linger")]
    assert "scores 1 where the do-nothing agent scores 0" in report.findings[0].what


@pytest.mark.parametrize("engine", ["local", "harbor"])
def test_ctrl_c_stops_the_audit_and_what_it_started(tmp_path: Path, engine: str) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rsiframe.cli.main", "tasks", "audit", str(AUDIT_FIXTURES),
         "--engine", engine],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(scratch.glob(f"rsiframe-audit-*/{engine}-*/*")) and time.monotonic() < deadline:
        time.sleep(0.2)  # until its first evaluations are under way
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 15, "it did not stop at once"
    assert err.strip().splitlines()[-1] == "rsiframe: interrupted" and "Traceback" not in err
    time.sleep(1)
    assert not list(scratch.glob("rsiframe-audit-*")), "its scratch folder is left"
    left = subprocess.run(["pgrep", "-f", str(scratch)], capture_output=True, text=True)
    assert left.stdout == "", f"processes left running: {left.stdout}"
