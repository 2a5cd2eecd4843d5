"""The pyfix verifier in Docker and on Harbor (e2e): the lookup module scores 0, the
solution and the oracle 1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rsiframe.tasks.taskset import TaskSet
from tests.support.pyfix import (
    AGENT,
    LOOKUP,
    local_engine,
    lookup_candidate,
    score,
    solution,
    task_set,
)

pytestmark = pytest.mark.e2e


# -- the local engine in Docker, the Harbor engine ----------------------------------------


def _docker_or_skip() -> None:
    from rsiframe.errors import EngineUnavailable
    from rsiframe.sandbox.bwrap import make_sandbox

    try:
        make_sandbox("docker")
    except EngineUnavailable as exc:
        if os.environ.get("RSIFRAME_REQUIRE_DOCKER"):
            raise
        pytest.skip(f"platform limit: no Docker engine with the base image here: {exc}")


def test_the_lookup_module_scores_zero_and_the_solution_one_in_docker(tmp_path: Path) -> None:
    _docker_or_skip()
    ts = task_set(tmp_path)
    # FROM python:3.11-slim is for Harbor's docker environment; the local Docker sandbox
    # builds only Debian-package Dockerfiles offline, and binds the host's Python instead
    (ts.root / "pyfix-001" / "environment" / "Dockerfile").unlink()
    ts = TaskSet.load(ts.root)
    reward, out = score(
        local_engine(tmp_path, "docker", "w1"), ts, lookup_candidate(tmp_path, LOOKUP)
    )
    assert (reward, out) == (0.0, "case 0: raised LookupError")
    reward, out = score(
        local_engine(tmp_path, "docker", "w2"), ts, lookup_candidate(tmp_path, solution())
    )
    assert (reward, out) == (1.0, "all 3 cases pass")


def test_the_lookup_module_scores_zero_and_the_oracle_one_on_harbor(tmp_path: Path) -> None:
    from rsiframe.evaluators.harbor.engine import HarborEngine
    from rsiframe.recipe.evaluator import HarborEngineConfig

    ts = task_set(tmp_path)
    cand = lookup_candidate(tmp_path, LOOKUP)
    reward, out = score(HarborEngine(HarborEngineConfig(agent=AGENT), tmp_path / "w1"), ts, cand)
    assert (reward, out) == (0.0, "case 0: raised LookupError")
    oracle = HarborEngine(HarborEngineConfig(harbor_agent="oracle"), tmp_path / "w2")
    reward, out = score(oracle, ts, cand)
    assert (reward, out) == (1.0, "all 3 cases pass")
