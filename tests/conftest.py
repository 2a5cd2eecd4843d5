"""Shared fixtures: a private key folder per test and a tiny, fast task set with a seed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rsiframe.cli.main import main

REPO = Path(__file__).resolve().parents[1]

# A shell without job control starts a background command ('make test &') with SIGINT
# ignored, and that is inherited by every run the tests start: the Ctrl-C tests would then
# see a run that cannot be interrupted (as rsiframe rightly keeps an ignored SIGINT).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _private_keys(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Never touch the user's real key folder."""
    monkeypatch.setenv("RSIFRAME_KEY_DIR", str(tmp_path_factory.mktemp("keys")))
    monkeypatch.delenv("RSIFRAME_FAULT", raising=False)


# The mini task set: task t<i> is solved when the candidate's `level` knob is >= i.
# The seed has level 1, so knobs can climb; every evaluation is a few shell commands.
TEST_SH = """#!/bin/bash
need=$(cat "${RSI_TESTS:-/tests}/need.txt")
got=$(cat "${RSI_APP:-/app}/answer.txt" 2>/dev/null || echo -1)
if [ "$got" -ge "$need" ] 2>/dev/null; then r=1; else r=0; fi
echo "need $need got $got reward $r"
echo $r > "${RSI_LOGS:-/logs}/verifier/reward.txt"
"""

AGENT = """import os, yaml
here = os.path.dirname(os.path.abspath(__file__))
cfg = yaml.safe_load(open(os.path.join(here, "config.yaml")))
print("level", cfg["level"], "style", cfg["style"])
open("answer.txt", "w").write(str(cfg["level"]))
"""


@dataclass
class Mini:
    root: Path
    recipe: Path
    tasks: Path
    seed: Path

    def run_dir(self, name: str = "run") -> Path:
        return self.root / name


def write_tasks(root: Path, n: int) -> None:
    for i in range(1, n + 1):
        t = root / f"t{i}"
        (t / "environment").mkdir(parents=True)
        (t / "tests").mkdir()
        (t / "task.toml").write_text(
            'version = "1.0"\n[agent]\ntimeout_sec = 20\n[verifier]\ntimeout_sec = 20\n'
        )
        (t / "instruction.md").write_text("Write your level to /app/answer.txt.\n")
        (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
        (t / "tests" / "need.txt").write_text(f"{i}\n")
        (t / "tests" / "test.sh").write_text(TEST_SH)


def recipe_text(
    *, generations: int = 2, children: int = 2, sandbox: str = "auto", extra: str = ""
) -> str:
    return (
        textwrap.dedent(f"""\
        name: mini
        seed: seed
        tasks:
          path: tasks
          split:
            train: [t1, t3, t5, t7]
            gate: [t2, t4, t6, t8]
            sealed: [t9, t10]
        surface:
          include: [config.yaml]
        evaluator:
          engine: local
          config:
            agent: python3 "$RSI_CANDIDATE/agent.py"
            sandbox: {sandbox}
            concurrency: 2
        slots:
          select: {{operator: best}}
          rollout: {{operator: local}}
          analyze: {{operator: failures}}
          mutate:
            operator: knobs
            config:
              max_changes: 1
              knobs:
                - {{file: config.yaml, key: level, range: [0, 9], step: 1}}
                - {{file: config.yaml, key: style, choices: [plain, fancy]}}
          novelty: {{operator: tree_dedup}}
          gate: {{operator: improves_parent}}
          record: {{operator: notes}}
          reflect: {{operator: lessons}}
        budget:
          max_generations: {generations}
        children_per_generation: {children}
        random_seed: 7
        """)
        + extra
        + in_flight(extra)
    )


def in_flight(extra: str = "") -> str:
    """``RSIFRAME_TEST_CANDIDATES=4 make test``: every mini recipe that does not set its own
    ``concurrency`` keeps that many candidates in flight (generational mode, so the same
    candidates, scores and champion as K=1; only the order of event lines may differ)."""
    k = os.environ.get("RSIFRAME_TEST_CANDIDATES")
    if not k or "concurrency:" in extra:
        return ""
    return f"\nconcurrency: {{candidates: {int(k)}}}\n"


def make_mini(root: Path, *, n_tasks: int = 10, **recipe_kw: object) -> Mini:
    root.mkdir(parents=True, exist_ok=True)
    write_tasks(root / "tasks", n_tasks)
    seed = root / "seed"
    seed.mkdir()
    (seed / "agent.py").write_text(AGENT)
    (seed / "config.yaml").write_text("level: 1\nstyle: plain\n")
    text = recipe_text(**recipe_kw)  # type: ignore[arg-type]
    recipe = root / "recipe.yaml"
    recipe.write_text(text)
    return Mini(root=root, recipe=recipe, tasks=root / "tasks", seed=seed)


@pytest.fixture
def mini(tmp_path: Path) -> Mini:
    return make_mini(tmp_path / "proj")


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


def pytest_sessionstart(session: pytest.Session) -> None:
    """CI sets RSIFRAME_REQUIRE_BWRAP so sandbox tests cannot silently skip there."""
    if os.environ.get("RSIFRAME_REQUIRE_BWRAP"):
        from rsiframe.sandbox.bwrap import bwrap_works

        if not bwrap_works():
            raise pytest.UsageError("RSIFRAME_REQUIRE_BWRAP is set but bubblewrap does not work")
