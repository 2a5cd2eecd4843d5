"""A small sat3 ablation grid end to end (e2e)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import cli
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e


# -- end to end ------------------------------------------------------------------------


def test_ablate_grid_on_sat3_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "grid"
    res = cli(
        "ablate",
        REPO / "recipes" / "sat3-quickstart.yaml",
        "--slot",
        "select",
        "--operators",
        "best,uniform",
        "--repeats",
        "2",
        "--set",
        "budget.max_evaluations=9",
        "--out",
        out,
        "--json",
        "--quiet",
    )
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == str(out.resolve())
    report = json.loads("\n".join(lines[1:]))
    assert [len(m["runs"]) for m in report["methods"]] == [2, 2]
    for m in report["methods"]:
        assert m["evaluations"] <= 9
        assert m["sealed"]["n"] == 2
    assert cli("verify", out / "uniform-r1").exit_code == 0
