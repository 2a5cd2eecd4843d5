"""A sat3 run reproduces exactly under `verify --reproduce` (e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.verify import tree_digest, verify_json

pytestmark = pytest.mark.e2e


def test_a_sat3_run_reproduces_exactly(tmp_path: Path) -> None:
    """The shipped SAT task set is deterministic: the champion reproduces with tolerance 0."""
    from tests.support.paths import REPO

    out = tmp_path / "sat"
    res = cli(
        "run",
        REPO / "recipes" / "sat3-quickstart.yaml",
        "--out",
        out,
        "--quiet",
        "--set",
        "budget.max_generations=1",
        "--set",
        "children_per_generation=2",
    )
    assert res.exit_code == 0, res.stderr
    before = tree_digest(out)
    code, report = verify_json(out, "--reproduce")
    assert code == 0, report["problems"]
    rep = report["reproduce"]
    assert rep["tasks"] == 60 and rep["max_deviation"] == 0.0
    assert tree_digest(out) == before
