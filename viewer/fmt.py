"""Formatting shared by the viewer's widgets: scores, times, states as styled text."""

from __future__ import annotations

import time

from rich.text import Text

STATE_STYLES = {
    "admitted": "bold green",
    "declined": "dim",
    "rejected": "dim red",
    "failed": "dim magenta",
    "abandoned": "dim",
    "evaluating": "yellow",
    "certified": "cyan",
    "proposed": "yellow",
    "mutated": "yellow",
    "running": "bold yellow",
    "finished": "green",
    "interrupted": "yellow",
    "budget_exhausted": "green",
    "unreadable": "bold red",
    "loading": "dim",
}
#: candidates shown dimmed in tables and the lineage
DIMMED = {"declined", "rejected", "failed", "abandoned"}
BADGE_STYLES = {"✓": "green", "✗": "bold red", "!": "magenta", "…": "yellow", "·": "dim"}


def score(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def when(ts: float | None) -> str:
    if not ts:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def duration(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def state(name: str) -> Text:
    return Text(name, style=STATE_STYLES.get(name, ""))


def badge(mark: str) -> Text:
    return Text(mark, style=BADGE_STYLES.get(mark, ""))


def budget_line(report: dict) -> str:
    """``used/limit`` for every budget dimension that is used or limited."""
    used, limits = report["used"], report["limits"]
    parts = []
    for key, label in (
        ("generations", "gen"),
        ("candidates", "cand"),
        ("evaluations", "evals"),
        ("task_runs", "task runs"),
        ("wall_seconds", "wall"),
        ("model_tokens", "tokens"),
        ("cost", "cost"),
    ):
        u, lim = used.get(key), limits.get(key)
        if not u and lim is None:
            continue
        shown = duration(u) if key == "wall_seconds" else f"{u:g}"
        if lim is not None:
            cap = duration(lim) if key == "wall_seconds" else f"{lim:g}"
            shown += f"/{cap}"
        parts.append(f"{label} {shown}")
    return " · ".join(parts)


def calls(n: int, cached: int) -> str:
    """``6 calls, 3 from cache``: model calls, those the ledger answered at no cost apart
    (as ``status`` writes them, :func:`rsiframe.audit.report.calls_text`)."""
    return f"{n} {'call' if n == 1 else 'calls'}" + (f", {cached} from cache" if cached else "")
