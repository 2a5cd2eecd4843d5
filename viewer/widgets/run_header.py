"""The run's header: name, state, budget, seed vs champion, counts and any problems."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from rsiframe.archive.state import Candidate, RunState
from rsiframe.viewer import fmt
from rsiframe.viewer.source import RunSource, in_flight


def header_text(source: RunSource) -> Text:
    st = source.state
    run_state = source.run_state()
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(source.name, style="bold")
    t.append("  ")
    t.append_text(fmt.state(run_state))
    if run_state == "running":
        t.append(" (live)", style="yellow")
    with source.lock:
        seed, champ = st.seed, source.champion()
        violations = list(st.violations)
        _append_counts(t, source)
        if run_state == "running":
            _append_in_flight(t, in_flight(st))
        t.append("\nbudget ", style="dim")
        t.append(fmt.budget_line(source.budget()))
        _append_models(t, source)
        t.append("\n")
        _append_seed_and_champion(t, seed, champ)
        _append_times(t, st)
    _append_problems(t, violations, source.notes())
    return t


def _append_counts(t: Text, source: RunSource) -> None:
    """``  40 candidates (30 admitted, 10 declined)  <run id>``."""
    counts = source.counts()
    t.append(f"  {len(source.state.candidates)} candidates", style="bold")
    if counts:
        t.append(" (" + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ")")
    t.append(f"  {source.state.run_id}", style="dim")


def _append_in_flight(t: Text, flight: list[tuple[str, str]]) -> None:
    """The first eight candidates in flight and their stage, and how many more."""
    if not flight:
        return
    t.append("\nin flight ", style="dim")
    t.append("  ".join(f"{cid} {stage}" for cid, stage in flight[:8]), style="yellow")
    if len(flight) > 8:
        t.append(f"  +{len(flight) - 8}", style="dim")


def _append_models(t: Text, source: RunSource) -> None:
    st = source.state
    calls = getattr(st, "model_calls", 0)
    if calls or source.recipe.get("models"):
        t.append("\nmodels ", style="dim")
        by_slot = getattr(st, "models_by_slot", {})
        cached = getattr(st, "model_cached", 0)
        t.append_text(model_cost(calls, st.tokens, st.cost, by_slot, cached))


def _append_seed_and_champion(t: Text, seed: Candidate | None, champ: Candidate | None) -> None:
    for label, c in (("seed", seed), ("champion", champ)):
        if c is None:
            continue
        t.append(f"{label} ", style="dim")
        t.append(c.id, style="bold yellow" if label == "champion" else "bold")
        scores = "/".join(fmt.score(c.score(s)) for s in ("train", "gate", "sealed"))
        t.append(f" {scores}  ")
    t.append("(train/gate/sealed)", style="dim")


def _append_times(t: Text, st: RunState) -> None:
    """When the run started and, once it is over, when it ended and why."""
    t.append(f"\nstarted {fmt.when(st.started_at)}", style="dim")
    if st.terminal is None:
        return
    t.append(f"  ended {fmt.when(st.last_ts)}", style="dim")
    reason = st.terminal.get("reason")
    if reason:
        t.append(f"  {reason}", style="dim")


def _append_problems(t: Text, violations: list[dict[str, Any]], notes: list[str]) -> None:
    """The latest information-flow violation, and the first three of the source's notes."""
    if violations:
        last = violations[-1]
        t.append(
            f"\n⚠ {len(violations)} information-flow violation(s); latest: "
            f"{last.get('slot')} operator {last.get('operator')} on {last.get('candidate')}: "
            f"{last.get('asked', '')}",
            style="bold red",
        )
    for note in notes[:3]:
        t.append(f"\n⚠ {note}", style="bold red")


def model_cost(calls: int, tokens: int, cost: float, by_slot: dict, cached: int = 0) -> Text:
    """``$0.0123 · 12 calls, 3 from cache · 34,567 tokens (mutate $0.0100, reflect
    $0.0023)``: the gateway's count (model_call events), evaluations' served models
    included; calls the ledger answered at no cost apart."""
    t = Text()
    t.append(f"${cost:.4f}", style="bold")
    t.append(f" · {fmt.calls(calls, cached)} · {tokens:,} tokens")
    slots = [f"{s} ${row.get('cost_usd', 0.0):.4f}" for s, row in sorted(by_slot.items())]
    if slots:
        t.append(f"  ({', '.join(slots)})", style="dim")
    return t


class RunHeader(Static):
    def __init__(self, source: RunSource, **kw) -> None:
        super().__init__(**kw)
        self.source = source

    def on_mount(self) -> None:
        self.refresh_run()

    def refresh_run(self) -> None:
        self.update(header_text(self.source))
