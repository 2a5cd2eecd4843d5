"""A researcher's own target for the method-on-a-target tests: the mini task set with a knob
space in its seed, and ``recipe show --json`` read."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.cli import cli
from tests.support.mini import Mini, make_mini

KNOBS = (
    "knobs:\n"
    "  - {file: config.yaml, key: level, range: [0, 9], step: 1}\n"
    "  - {file: config.yaml, key: style, choices: [plain, fancy]}\n"
)


def target(root: Path) -> Mini:
    """The mini task set as a researcher's target: its seed holds a knob space (knobs.yaml),
    its own slots are its baseline method."""
    mini = make_mini(root, generations=2, children=2)
    (mini.seed / "knobs.yaml").write_text(KNOBS)
    text = mini.recipe.read_text().replace("name: mini", "name: my-target")
    text = re.sub(r"      knobs:\n(        - .*\n)+", "      space: knobs.yaml\n", text)
    mini.recipe.write_text(text)
    return mini


def show(*args: object) -> dict:
    res = cli("recipe", "show", *args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)
