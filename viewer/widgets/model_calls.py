"""A candidate's model calls: one row per call (slot, model, tokens, cost, latency), and
the chosen call's prompt and response, read from its hash-checked artifacts.

The rows come from the run's ``model_call`` events (the gateway's own count); a call
served from the ledger (resume, replay) is marked ``cached``; a refused or failed one
shows its status and error.
"""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Static

from rsiframe.archive.log import Event
from rsiframe.errors import RsiError
from rsiframe.viewer.evidence import Pager, read_json

#: the most of a prompt or response shown (the artifact holds all of it)
SHOW_CHARS = 20_000


def calls_of(events: list[Event]) -> list[dict[str, Any]]:
    """The ``model_call`` events among a candidate's events, in ledger order."""
    return sorted((ev.data for ev in events if ev.type == "model_call"), key=lambda d: d["seq"])


def totals(calls: list[dict[str, Any]]) -> tuple[int, float]:
    tokens = sum(int(d.get("prompt_tokens", 0)) + int(d.get("completion_tokens", 0)) for d in calls)
    return tokens, sum(float(d.get("cost_usd", 0.0)) for d in calls)


def prompt_text(request: Any) -> str:
    """A request body as the model saw it: system text, then each message by role."""
    if not isinstance(request, dict):
        return str(request)
    parts = []
    for key in ("system", "instructions"):
        if isinstance(request.get(key), str):
            parts.append(f"[{key}]\n{request[key]}")
    msgs = request.get("messages", request.get("input"))
    if isinstance(msgs, str):
        msgs = [{"role": "user", "content": msgs}]
    for m in msgs if isinstance(msgs, list) else []:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        parts.append(f"[{m.get('role', '?')}]\n{content or ''}")
    if "prompt" in request and not parts:
        parts.append(str(request["prompt"]))
    return "\n\n".join(parts)


def answer_text(data: bytes) -> str:
    """A response body's answer: a JSON completion, or a stream's deltas joined."""
    try:
        parsed = json.loads(data)
    except ValueError:
        return _stream_text(data)
    return _completion_text(parsed)


def _stream_text(data: bytes) -> str:
    """A server-sent event stream's text: each ``data:`` line's deltas, joined."""
    chunks = []
    for line in data.decode(errors="replace").splitlines():
        payload = line[5:].strip() if line.startswith("data:") else ""
        if not payload or payload == "[DONE]":
            continue
        try:
            ev = json.loads(payload)
        except ValueError:
            continue
        chunks += _event_deltas(ev)
    return "".join(chunks)


def _event_deltas(ev: Any) -> list[str]:
    """The text of one stream event: OpenAI's choices (text or delta) and Anthropic's delta."""
    out = [
        str(ch.get("text") or (ch.get("delta") or {}).get("content") or "")
        for ch in ev.get("choices") or []
    ]
    delta = ev.get("delta")
    if isinstance(delta, dict) and isinstance(delta.get("text"), str):
        out.append(delta["text"])
    return out


def _completion_text(parsed: Any) -> str:
    """A JSON completion's text: OpenAI's choices (tool calls shown) or Anthropic's blocks."""
    out = []
    for ch in parsed.get("choices") or [] if isinstance(parsed, dict) else []:
        msg = ch.get("message") or {}
        out.append(str(ch.get("text") or msg.get("content") or ""))
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            out.append(f"\n[tool call] {fn.get('name')}({fn.get('arguments')})")
    for block in parsed.get("content") or [] if isinstance(parsed, dict) else []:
        if isinstance(block, dict):
            out.append(str(block.get("text", "")))
    return "".join(out)


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
