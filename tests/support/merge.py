"""The mini project with merges (the ``merge_run`` fixture) and its recipe edits."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import cli
from tests.support.mini import Mini, make_mini


def edit_recipe(mini: Mini, *pairs: tuple[str, str]) -> None:
    text = mini.recipe.read_text()
    for old, new in pairs:
        assert old in text
        text = text.replace(old, new)
    mini.recipe.write_text(text)


def run_and_verify(mini: Mini, *sets: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    res = cli("run", mini.recipe, "--out", mini.run_dir(), "--quiet", *args)
    assert res.exit_code == 0, res.stderr
    assert cli("verify", mini.run_dir()).exit_code == 0


def merge_mini(root: Path) -> Mini:
    mini = make_mini(root / "proj", generations=3, children=3)
    # level and style apart, so both sides' changes merge line by line
    (mini.seed / "config.yaml").write_text("level: 1\na: 0\nb: 0\nc: 0\nstyle: plain\n")
    edit_recipe(
        mini,
        ("{operator: best}", "{operator: uniform}"),
        (
            "  rollout: {operator: local}",
            "  merge: {operator: three_way, rate: 0.5}\n  rollout: {operator: local}",
        ),
        ("{operator: improves_parent}", "{operator: always}"),
    )
    return mini
