"""A candidate's model calls: one row per call (slot, model, tokens, cost, latency), and
the chosen call's prompt and response, read from its hash-checked artifacts.

The rows come from the run's ``model_call`` events (the gateway's own count); a call
served from the ledger (resume, replay) is marked ``cached``; a refused or failed one
shows its status and error.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Static

from rsiframe.archive.log import Event
from rsiframe.audit.evidence import Pager, answer_text, calls_of, prompt_text, read_json
from rsiframe.errors import RsiError

#: the most of a prompt or response shown (the artifact holds all of it)
SHOW_CHARS = 20_000


def _cut(text: str) -> str:
    return text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS] + "\n… (cut)"


class ModelCallsView(Horizontal):
    """The table of a candidate's calls beside the chosen call's prompt and response."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.run: Any = None
        self.calls: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield DataTable(id="model-calls-table", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="model-call-body"):
            yield Static(Text("no model calls", style="dim"), id="model-call-text")

    def show(self, run: Any, events: list[Event]) -> None:
        self.run = run
        self.calls = calls_of(events)
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns("#", "slot", "model", "status", "in", "out", "cost $", "ms")
        for d in self.calls:
            status = "cached" if d.get("cached") else str(d.get("status", ""))
            style = "green" if d.get("status") == 200 else "bold red"
            table.add_row(
                str(d["seq"]),
                str(d.get("slot") or ""),
                str(d.get("model", "")),
                Text(status, style="dim" if d.get("cached") else style),
                Text(str(d.get("prompt_tokens", 0)), justify="right"),
                Text(str(d.get("completion_tokens", 0)), justify="right"),
                Text(f"{float(d.get('cost_usd', 0.0)):.6f}", justify="right"),
                Text(f"{float(d.get('latency_ms', 0.0)):.0f}", justify="right"),
                key=str(d["seq"]),
            )
        if self.calls:
            self.load(self.calls[0])
        else:
            self._put(Text("no model calls for this candidate", style="dim"))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key is not None else None
        for d in self.calls:
            if str(d["seq"]) == key:
                self.load(d)

    @work(thread=True, exclusive=True, group="model-call")
    def load(self, d: dict[str, Any]) -> None:
        text = Text()
        tokens = int(d.get("prompt_tokens", 0)) + int(d.get("completion_tokens", 0))
        text.append(f"call {d['seq']}", style="bold")
        text.append(
            f"  {d.get('slot') or '-'} · {d.get('model')} · {d.get('path', '')} · {tokens} tokens"
            f" ({d.get('usage_source', 'provider')}) · ${float(d.get('cost_usd', 0.0)):.6f}"
            + (" · served from the ledger" if d.get("cached") else ""),
            style="dim",
        )
        if d.get("error"):
            text.append(f"\n{d['error']}", style="bold red")
        text.append("\n\nprompt\n", style="bold cyan")
        text.append(_cut(self._read(d.get("request"), prompt_text)))
        text.append("\n\nresponse\n", style="bold cyan")
        text.append(_cut(self._read(d.get("response"), answer_text, raw=True)))
        self.app.call_from_thread(self._put, text)

    def _read(self, digest: str | None, render: Any, raw: bool = False) -> str:
        if not digest:
            return "(none recorded)"
        try:
            if raw:
                pager = Pager(self.run, digest, page_bytes=8 << 20)
                if not pager.check():
                    return f"(artifact {digest} does not match its hash)"
                return render(pager.path.read_bytes())
            return render(read_json(self.run, digest))
        except (RsiError, OSError, ValueError) as exc:
            return f"({exc})"

    def _put(self, text: Text) -> None:
        self.query_one("#model-call-text", Static).update(text)
