"""`?`: every key, on every screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# rsiframe view

A read-only viewer: nothing is ever written into a run folder. A run that is still
being written updates on screen within a second or two.

| where | key | does |
| --- | --- | --- |
| everywhere | `?` | this help |
| | `q` | quit |
| | `escape` | back |
| runs | `enter` | open a run |
| run | `enter` | open the candidate under the cursor |
| | `/` | filter: words, or `state:admitted`, `gen:3`, `parent:c0002`; `escape` clears |
| | `s` / `r` | cycle the sort column (id, gate, train, sealed, gen, state) / reverse it |
| | click a header | sort by that column |
| | `l` | lineage tree |
| | `d` | diff this run's resolved recipe against another run (ablations) |
| | `c` | jump to the champion |
| | `o` | hide or show the recipe and the score plot |
| lineage | `enter` | open a candidate; `space` opens or closes a node |
| | `x` | open everything below the cursor |
| | `c` | jump to the champion |
| candidate | `1`..`5` | diff, certificates, rewards, evidence, notes |
| | `6` | model calls (a run with models): prompt, response, tokens, cost |
| | `p` | open the parent |
| | `b` | a merge: take the diff against the other parent |
| | `[` / `]` | previous / next page of a large log |

**Badges**: ✓ every evaluation certified (signature verifies and binds this run, commit,
recipe, evaluator and task set) · ✗ a certificate was rejected · ! evaluation failed ·
… evaluating · · never evaluated. Scores come only from verified certificates.

**Plot**: ● gate and · train per candidate (bucketed to the width), ─ best admitted gate
so far, ★ the champion.
"""


class HelpScreen(ModalScreen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Close"),
        Binding("question_mark", "app.pop_screen", "Close"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Markdown(HELP)
