"""The first hour, as README says it (e2e): the set-up goes on to the quickstart when apt
cannot install bubblewrap (a stand-in apt-get that fails, never the machine's own), and the
first screen's next four commands run as written right after a quickstart.

The quickstart itself is tests/e2e/test_quickstart.py (about 5 minutes); here a two-candidate
sat3 run stands in for it, in a folder named as the quickstart names its run, so the
commands are the README's, byte for byte."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.e2e

QUICK = "recipes/sat3-quickstart.yaml --set budget.max_candidates=2 --quiet"


def _first_screen() -> tuple[str, list[str]]:
    """README's "Next" section: its set-up block and its commands, one per line."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Next: four things to do", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 2, blocks
    commands = [line for line in blocks[1].splitlines() if line.strip()]
    assert len(commands) == 4, commands
    return blocks[0], commands


def _bash(script: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        # SHELL: `script` runs its command with $SHELL, which a CI machine may leave unset
        # (then /bin/sh, where README's `source` does not exist)
        env={
            **os.environ,
            "SHELL": "/bin/bash",
            "TERM": "xterm-256color",
            "COLUMNS": "160",
            "LINES": "40",
        },
    )


@pytest.fixture(scope="module")
def after_quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder as a fresh clone is after `make quickstart`: .venv, recipes, tasks, and
    archive/quickstart-<time> holding a finished run."""
    home = tmp_path_factory.mktemp("clone")
    for name in (".venv", "recipes", "tasks"):
        (home / name).symlink_to(REPO / name)
    out = "archive/quickstart-20260101T000000Z"
    res = _bash(f".venv/bin/rsiframe run {QUICK} --out {out}", home, 900)
    assert res.returncode == 0, res.stderr
    return home


def test_the_first_screen_commands_run_as_written(after_quickstart: Path) -> None:
    prelude, commands = _first_screen()
    view, status, verify, compare = commands
    # 1. the viewer is a terminal app: run under a pseudo-terminal, then q
    inner = shlex.quote(prelude + view.split("#", 1)[0])
    res = _bash(f"(sleep 8; printf q) | script -qfec {inner} /dev/null", after_quickstart, 120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr
    assert "c0000" in res.stdout and "Traceback" not in res.stdout
    # 2. status: header first, the next steps last
    res = _bash(prelude + status, after_quickstart, 120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("sat3-quickstart[budget.max_candidates=2]: finished"), lines[0]
    assert lines[-1].startswith("next: rsiframe view archive/quickstart-20260101T000000Z")
    # 3. verify
    res = _bash(prelude + verify, after_quickstart, 300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAILED" not in res.stdout
    # 4. compare two methods (an ablation of two selection operators, then compare)
    res = _bash(prelude + compare, after_quickstart, 1200)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "select-best" in res.stdout and "select-uniform" in res.stdout, res.stdout


def test_quickstart_goes_on_when_bubblewrap_cannot_be_installed(tmp_path: Path) -> None:
    apt = tmp_path / "apt-get"
    apt.write_text("#!/bin/bash\necho 'E: Unable to locate package bubblewrap' >&2\nexit 100\n")
    apt.chmod(0o755)
    quickstart = f"{QUICK} --set budget.max_candidates=1 --out {tmp_path / 'run'}"
    stand_ins = ["BWRAP=rsiframe-test-no-such-bwrap", f"APT_GET={apt}", f"QUICKSTART={quickstart}"]
    res = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "quickstart", *stand_ins],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    note = next(i for i, line in enumerate(lines) if line.startswith("note: no bubblewrap"))
    assert "install it later with" in lines[note]
    # then the quickstart ran: its run folder, its summary, the activation hint last
    assert any(line.endswith(": finished") for line in lines[note + 1 :]), lines
    assert lines[-1].startswith("the rsiframe commands are in .venv/bin: source "), lines[-1]
    assert (tmp_path / "run" / "events.jsonl").is_file()
