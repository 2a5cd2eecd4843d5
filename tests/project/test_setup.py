"""The set-up never aborts and says what it does: `make sandbox` with a stand-in apt-get that
fails (never the machine's real apt or its lock) goes on with the process sandbox and one
line saying what that means and how to get bubblewrap later; `make setup` prints one line per
step with its time. The whole `make quickstart` through a failing apt is in
tests/e2e/test_setup_quickstart.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

NOTE = "note: no bubblewrap, so evaluations run as plain processes"


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return path


def _make(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


FAILING = {
    "no package": "echo 'E: Unable to locate package bubblewrap' >&2\nexit 100\n",
    "lock held": "echo 'E: Could not get lock /var/lib/apt/lists/lock. It is held by process "
    "4242 (unattended-upgr)' >&2\nexit 100\n",
}


@pytest.mark.parametrize("why", sorted(FAILING))
def test_a_failing_apt_leaves_the_process_sandbox_and_one_line(tmp_path: Path, why: str) -> None:
    apt = _script(tmp_path / "apt-get", FAILING[why])
    res = _make(
        "sandbox",
        "BWRAP=rsiframe-test-no-such-bwrap",
        f"APT_GET={apt}",
        env={"RSIFRAME_APT_LOCK_TIMEOUT": "3"},
    )
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert res.stderr == "", res.stderr  # apt's own errors are not shown; the reason is
    note = lines[-1]
    assert note.startswith(NOTE) and "every certificate records" in note, lines
    assert note.endswith("install it later with: make sandbox") or note.endswith(
        "sudo apt-get install bubblewrap"
    ), note
    if os.geteuid() == 0:  # the install was tried: its step line says why it failed
        assert len(lines) == 2 and lines[0].startswith("setup: installing bubblewrap"), lines
        assert "waits up to 3 s" in lines[0] and "failed after" in lines[0], lines[0]
        assert "E: " in lines[0], lines[0]


def test_bubblewrap_present_is_silent() -> None:
    res = _make("sandbox", "BWRAP=sh")
    assert res.returncode == 0 and res.stdout == "" and res.stderr == ""


def test_setup_prints_one_line_per_step_with_its_time(tmp_path: Path) -> None:
    """scripts/setup-venv.sh with a stand-in python whose venv's pip installs nothing."""
    pip = '#!/bin/bash\necho "$@" >> "$(dirname "$0")/pip.args"\n'
    python = _script(
        tmp_path / "python3",
        f'[ "$1 $2" = "-m venv" ] || exit 9\nmkdir -p "$3/bin"\n'
        f'cat > "$3/bin/pip" <<\'PIP\'\n{pip}PIP\nchmod +x "$3/bin/pip"\n',
    )
    venv = tmp_path / "venv"
    res = subprocess.run(
        [str(REPO / "scripts" / "setup-venv.sh")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHON": str(python), "VENV": str(venv)},
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 4, lines
    for line in lines[:3]:
        assert line.startswith("setup: ") and line.endswith(" s"), line
    assert "torch 2.13.0" in lines[1] and "rsiframe" in lines[2]
    assert lines[3].startswith("setup: done in ") and f"source {venv}/bin/activate" in lines[3]
    assert (venv / ".installed").exists()
    args = (venv / "bin" / "pip.args").read_text().splitlines()
    assert (
        args[0].endswith("torch==2.13.0") and "-e .[dev,train,llm,agents,cluster,docker,mlflow]" in args[1]
    )


def test_a_failing_step_shows_its_output(tmp_path: Path) -> None:
    python = _script(tmp_path / "python3", "echo 'Error: no module venv' >&2\nexit 1\n")
    res = subprocess.run(
        [str(REPO / "scripts" / "setup-venv.sh")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHON": str(python), "VENV": str(tmp_path / "v")},
        timeout=60,
    )
    assert res.returncode == 1
    assert "failed after" in res.stdout and "Error: no module venv" in res.stderr
