"""A candidate's certified records: every field, and whether its signature verifies and
binds this run (the fold's verdict: only bound, verified records carry scores)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from rsiframe.archive import state as state_mod
from rsiframe.certs.records import CertifiedRecord
from rsiframe.viewer import fmt

SKIP = {"rewards", "errors", "trajectories"}


def _value(key: str, v: Any) -> str:
    if key in ("started_at", "finished_at") and isinstance(v, int | float):
        return fmt.when(v)
    if isinstance(v, float):
        return f"{v:.4f}"
    if isinstance(v, dict | list):
        return json.dumps(v, sort_keys=True, separators=(", ", ": "), default=str)
    return "—" if v is None else str(v)


def _attempt_head(split: str, a: state_mod.Attempt) -> Text:
    """``train #1  ✓ signature verifies ...``: the attempt and the fold's verdict on it."""
    head = Text(f"{split} #{a.attempt}  ", style="bold")
    if a.status == "certified" and a.record is not None:
        head.append("✓ signature verifies", style="green")
        head.append(
            " · binds run, commit, tree, parent, recipe, evaluator, task set",
            style="dim green",
        )
    elif a.status == "invalid":
        head.append(f"✗ {a.error}", style="bold red")
    else:
        head.append(a.status + (f": {a.error}" if a.error else ""), style="magenta")
    return head


def _predicate_rows(t: Table, pred: dict[str, Any]) -> None:
    """One row per field of the predicate; a non-empty table's items indented below it."""
    for key, v in pred.items():
        if key in SKIP:
            continue
        if isinstance(v, dict) and v:  # model identity, data digests, contamination
            t.add_row(key, "")
            for sub, x in v.items():
                style = "bold" if "contamination" in sub else ""
                t.add_row(f"  {sub}", Text(_value(sub, x), style=style))
        else:
            t.add_row(key, _value(key, v))


def _record_table(record: CertifiedRecord, keyid: str) -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="dim", no_wrap=True)
    t.add_column(overflow="fold")
    t.add_row("subject commit", record.commit)
    t.add_row("subject tree", record.tree)
    t.add_row("signed by key", keyid)
    pred = record.predicate.model_dump(mode="json")
    _predicate_rows(t, pred)
    t.add_row(
        "tasks",
        f"{len(pred.get('rewards', {}))} rewarded, {len(pred.get('errors', {}))} with errors",
    )
    return t


def certificate_group(c: state_mod.Candidate, keyid: str) -> Group:
    parts: list[Any] = []
    if not c.attempts:
        parts.append(Text("no evaluations", style="dim"))
    for split, attempts in c.attempts.items():
        for a in attempts:
            parts.append(_attempt_head(split, a))
            if a.record is not None:
                parts += [_record_table(a.record, keyid), Text("")]
    return Group(*parts)


class CertificatesView(Static):
    def show(self, c: state_mod.Candidate, keyid: str) -> None:
        self.update(certificate_group(c, keyid))
