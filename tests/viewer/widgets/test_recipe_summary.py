"""The run screen's recipe panel keeps its slot-name column at every width (at 160 columns
and wider a long operator once squeezed it out); the candidate footer names its tab keys."""

from __future__ import annotations

import io

from rich.console import Console

from rsiframe.api import SLOTS
from rsiframe.viewer.widgets.recipe_summary import recipe_table

RECIPE = {
    "slots": {
        "select": {
            "operator": "/home/someone/project/ops/select.py:RankProportionalSelection",
            "config": {"pressure": 1.5, "window": [1, 2, 3], "note": "x" * 80},
        },
        "rollout": {"operator": "local", "config": {"max_tasks": None}},
        "mutate": {"operator": "knobs", "config": {"space": "knobs.yaml", "max_changes": 2}},
        "gate": {"operator": "improves_parent", "config": {"min_delta": 0.0}},
        "record": {"operator": "notes", "config": {}},
    },
    "budget": {"max_generations": 6, "max_candidates": 24},
}


def test_slot_names_survive_every_width() -> None:
    # the panel's width at 80, 120, 160 and 200 terminal columns, and wider
    for width in (24, 38, 44, 51, 62, 90, 140):
        console = Console(width=width, file=io.StringIO(), record=True)
        console.print(recipe_table(RECIPE, "r.yaml", width))
        lines = console.export_text().splitlines()
        slots = [s for s in SLOTS if s in RECIPE["slots"]]
        for slot, line in zip(slots, lines, strict=False):
            assert line.startswith(f"{slot} "), (width, line)
        assert lines[0][9:].startswith("select.py:Rank"), (width, lines[0])


def test_candidate_footer_names_the_tab_keys() -> None:
    from rsiframe.viewer.screens.candidate import TABS, CandidateScreen

    shown = {b.key: b.description for b in CandidateScreen.BINDINGS if b.show}
    assert shown == {**{"escape": "Back", "p": "Parent"}, **{
        str(i + 1): t.capitalize() for i, t in enumerate(TABS)
    }}  # fmt: skip
