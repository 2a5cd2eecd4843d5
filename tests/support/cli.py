"""The CLI as the tests drive it: in-process (``cli``) or as a real process (``cli_proc``),
and what a run folder says (``status_json``, ``events``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from click.testing import CliRunner, Result

from rsiframe.cli.main import main

if TYPE_CHECKING:
    from tests.support.mini import Mini


def cli(*args: str) -> Result:
    """Run the CLI in-process; stdout and stderr are kept apart."""
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def cli_proc(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a real process (for signals and exit statuses)."""
    return subprocess.run(
        [sys.executable, "-m", "rsiframe.cli.main", *[str(a) for a in args]],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def status_json(run_dir: Path) -> dict:
    res = cli("status", run_dir, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def assert_user_error(res, code: int, *needles: str) -> None:  # type: ignore[no-untyped-def]
    assert res.exit_code == code, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("rsiframe: error: ")
    assert "Traceback" not in res.stderr + res.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]


def edit(mini: Mini, old: str, new: str) -> None:
    text = mini.recipe.read_text()
    assert old in text
    mini.recipe.write_text(text.replace(old, new))


def run_proc(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsiframe.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
    )
