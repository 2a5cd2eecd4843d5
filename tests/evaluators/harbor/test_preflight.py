"""rsiframe.evaluators.harbor.preflight: an environment that is unknown, down or cannot
start is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli
from tests.support.harbor import harbor_recipe
from tests.support.paths import SAT3


def test_unknown_environment_is_one_line_exit_2(tmp_path: Path) -> None:
    res = cli(
        "run",
        str(harbor_recipe(tmp_path, SAT3, environment="podman")),
        "--out",
        str(tmp_path / "r"),
    )
    assert res.exit_code == 2
    assert "evaluator.config.environment" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r").exists()


def test_docker_engine_down_is_one_line_exit_2(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(
        "#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n"
    )
    (fake / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    res = cli(
        "run",
        str(harbor_recipe(tmp_path, SAT3, environment="docker")),
        "--out",
        str(tmp_path / "r"),
    )
    assert res.exit_code == 2, res.stderr
    assert "Docker engine is not running" in res.stderr
    assert not (tmp_path / "r").exists()


def test_an_environment_that_cannot_start_is_one_line_exit_2(tmp_path: Path, monkeypatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no bubblewrap here
    res = cli("run", str(harbor_recipe(tmp_path, SAT3)), "--out", str(tmp_path / "r"))
    assert res.exit_code == 2, res.stderr
    assert "the bwrap environment needs bubblewrap" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
