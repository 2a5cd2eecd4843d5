"""The method policy operators drive real runs of the mini task set."""

from __future__ import annotations

from pathlib import Path

import pytest

# -- in real runs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        ["slots.select.operator=score_child_prop", "slots.gate.operator=keep_all"],
        ["slots.select.operator=pareto"],
        ["slots.gate.operator=paired_test"],
    ],
)
def test_method_operators_drive_a_real_run(tmp_path: Path, sets: list[str]) -> None:
    from tests.support.cli import cli, status_json
    from tests.support.mini import make_mini

    mini = make_mini(tmp_path / "proj", generations=2, children=2)
    res = cli(
        "run",
        mini.recipe,
        "--out",
        mini.run_dir(),
        "--quiet",
        *[a for s in sets for a in ("--set", s)],
    )
    assert res.exit_code == 0, res.stderr
    status = status_json(mini.run_dir())
    assert status["state"] == "finished"
    children = [c for c in status["candidates"] if c["parent"]]
    assert len(children) == 4
    if "slots.gate.operator=keep_all" in sets:
        assert all(c["state"] == "admitted" for c in children if c["scores"]["gate"] is not None)
