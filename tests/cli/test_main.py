"""The `rsiframe` group: help that explains, and the exit codes of a real process."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli, cli_proc
from tests.support.mini import make_mini


def test_help_explains() -> None:
    res = cli("--help")
    assert res.exit_code == 0
    for cmd in ("run", "resume", "status", "verify", "recipe", "operators"):
        assert cmd in res.stdout
    assert "KEY=VALUE" in cli("run", "--help").stdout


def test_real_process_exit_codes(tmp_path: Path) -> None:
    mini = make_mini(tmp_path / "p")
    bad = cli_proc("run", mini.root / "missing.yaml")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    ok = cli_proc(
        "run", mini.recipe, "--out", mini.run_dir(), "--quiet", "--set", "budget.max_generations=1"
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[0] == str(mini.run_dir().resolve())
