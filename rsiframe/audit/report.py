"""What ``status``, ``verify`` and the end-of-run summary say: pydantic models and tables."""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from rsiframe.archive.loader import LoadedRun
from rsiframe.archive.log import chain_head
from rsiframe.archive.state import CANDIDATE_STATES, Candidate, RunState
from rsiframe.engine.budget import BudgetGuard
from rsiframe.errors import RunFolderError, shown_path
from rsiframe.evaluators import health
from rsiframe.gateway.ledger import LedgerTail
from rsiframe.recipe.schema import Budget


class Scores(BaseModel):
    train: float | None
    gate: float | None
    sealed: float | None


class CandidateStatus(BaseModel):
    id: str
    parent: str | None
    generation: int
    state: str
    scores: Scores
    description: str
    decision: str | None
    reasons: list[str]
    commit: str | None
    #: D/T/H builds: model and dataset digests, cache hits, training seconds, tokens
    model: dict[str, Any] | None = None
    #: the contamination audit of its dataset (counts only for sealed), when one ran
    contamination: dict[str, Any] | None = None
    #: task errors with an infrastructure reason, per split: {split: {reason: count}}
    errors: dict[str, dict[str, int]] = {}
    #: where its proposal placed it in a structured archive (island, MAP-Elites cell)
    placement: dict[str, Any] = {}
    #: every parent, ``parent`` first: two for a merge
    parents: list[str] = []
    #: the evaluation stage a staged evaluation stopped it at (``train@1``), if any
    stopped_at: str | None = None


def model_of(c: Candidate) -> dict[str, Any] | None:
    """The model a candidate's latest record (or model_built event) names, in short."""
    rec = next((r for s in ("gate", "train", "sealed") if (r := c.record(s)) is not None), None)
    m = rec.predicate.model if rec is not None and rec.predicate.model else c.model
    if not m:
        return None
    steps = m.get("steps", {})
    return {
        "name": m.get("name"),
        "weights_digest": m.get("weights_digest"),
        "config_digest": m.get("config_digest"),
        "dataset_digest": m.get("dataset_digest"),
        "cached": {k: v.get("cached") for k, v in steps.items()},
        "training_seconds": m.get("training_seconds"),
        "tokens": (m.get("tokens") or {}).get("total_tokens"),
    }


def contamination_of(c: Candidate) -> dict[str, Any] | None:
    audit = ((c.rejected or {}).get("details") or {}).get("audit")
    if audit is None and c.model:
        audit = c.model.get("contamination") or None
    return dict(audit) if audit else None


def _flag(c: CandidateStatus) -> str:
    a = c.contamination
    if not a or not a.get("contaminated"):
        return ""
    counts = ", ".join(f"{n} {s}" for s, n in a.get("overlapping", {}).items() if n)
    return f"contaminated ({a.get('policy')}: {counts} items); "


class StatusReport(BaseModel):
    run_id: str
    name: str
    path: str
    state: str
    reason: str | None
    seed: str | None
    champion: str | None
    budget: dict[str, Any]
    counts: dict[str, int]
    candidates: list[CandidateStatus]
    notes: list[str]
    #: operators' reads beyond their slot's view (information_flow_violation events)
    violations: list[dict[str, Any]] = []
    #: infrastructure errors of the seed, and of the children added up, by split, with one example:
    #: "seed train: 10/10 tasks errored: agent could not start (10) (e.g. t1: ...)"
    health: list[str] = []
    #: ``N:HASH`` of the event chain (``archive.chain_head``): keep it to detect truncation
    head: str = ""
    #: models (issue 13): the gateway's count plus an evaluation's served model; per slot
    #: ``{slot: {cost_usd, model_tokens, model_calls}}`` ("evaluate": the served model)
    cost_usd: float = 0.0
    model_tokens: int = 0
    model_calls: int = 0
    #: of ``model_calls``, those answered from the gateway's ledger at no cost
    model_calls_cached: int = 0
    models_by_slot: dict[str, dict[str, Any]] = {}
    #: the models' check before each session's first generation, metered apart from the
    #: budget: {"calls", "tokens", "cost_usd"} (empty: none was made)
    model_check: dict[str, Any] = {}
    #: calls in the gateway's ledger that no event records yet (a driver killed after the
    #: gateway recorded them; the next resume records them): {"calls", "paid", "tokens",
    #: "cost_usd"} (empty: none)
    unrecorded: dict[str, Any] = {}
    #: what the run warned about as it began (a config valid but likely not meant)
    warnings: list[str] = []


def scores_of(c: Candidate) -> Scores:
    return Scores(train=c.score("train"), gate=c.score("gate"), sealed=c.score("sealed"))


def _reasons(c: Candidate) -> list[str]:
    if c.rejected:
        return [f"{c.rejected.get('stage')}: {r}" for r in c.rejected.get("reasons", [])]
    if c.abandoned:
        return [c.abandoned]
    errors = [a.error for tries in c.attempts.values() for a in tries[-1:] if a.error]
    for split in ("train", "gate") if not errors else ():
        rec = c.record(split)
        if rec is not None and rec.predicate.errors:  # e.g. a harness that hung or crashed
            errs = rec.predicate.errors
            first = next(iter(errs.values())).splitlines()[0]
            errors.append(f"{split}: {len(errs)}/{len(rec.predicate.rewards)} tasks: {first}")
    return errors


def status_of(loaded: LoadedRun) -> StatusReport:
    st = loaded.state
    lock = loaded.paths.read_json(loaded.paths.recipe_lock)
    try:
        guard = BudgetGuard(Budget.model_validate(lock["resolved"].get("budget", {})))
    except (KeyError, AttributeError, ValidationError) as exc:
        raise RunFolderError(
            "recipe.lock.json holds no valid resolved recipe", where=str(loaded.paths.root)
        ) from exc
    counts = dict.fromkeys(CANDIDATE_STATES, 0)
    rows = []
    for c in st.candidates.values():
        counts[c.state] += 1
        rows.append(
            CandidateStatus(
                id=c.id,
                parent=c.parent,
                generation=c.generation,
                state=c.state,
                scores=scores_of(c),
                description=c.description,
                decision=c.decision["reason"] if c.decision else None,
                reasons=_reasons(c),
                commit=c.commit,
                model=model_of(c),
                contamination=contamination_of(c),
                errors=health.counts_of(c),
                placement=c.placement,
                parents=c.parents,
                stopped_at=c.stopped_at,
            )
        )
    champ = st.champion()
    seed = st.seed
    return StatusReport(
        run_id=st.run_id,
        name=st.name,
        path=str(loaded.paths.root),
        state=loaded.run_state(),
        reason=(st.terminal or {}).get("reason"),
        seed=seed.id if seed else None,
        champion=champ.id if champ else None,
        budget=guard.report(st),
        counts=counts,
        candidates=rows,
        notes=loaded.notes + st.problems,
        warnings=list(st.warnings),
        violations=list(st.violations),
        health=health_lines(st),
        head=chain_head(loaded.events) if loaded.events else "",
        cost_usd=round(st.cost, 6),
        model_tokens=st.tokens,
        model_calls=st.model_calls,
        model_calls_cached=st.model_cached,
        models_by_slot={
            slot: {"cached_calls": 0, **row, "cost_usd": round(row["cost_usd"], 6)}
            for slot, row in sorted(st.models_by_slot.items())
        },
        model_check={**st.model_check, "cost_usd": round(st.model_check["cost_usd"], 6)}
        if st.model_check
        else {},
        unrecorded=unrecorded_calls(loaded),
    )


def unrecorded_calls(loaded: LoadedRun) -> dict[str, Any]:
    """The ledger's entries no ``model_call`` event holds yet: what the gateway recorded
    (and the provider was paid) after the driver's last event."""
    tail = LedgerTail(loaded.paths.root / "model-calls" / "ledger.jsonl")  # runmodels.FOLDER
    entries = [e for e in tail.read() if not loaded.state.model_seen(e.seq)]
    if not entries:
        return {}
    paid = [e for e in entries if e.status == 200 and not e.cached]
    return {
        "calls": len(entries),
        "paid": len(paid),
        "tokens": sum(e.prompt_tokens + e.completion_tokens for e in entries),
        "cost_usd": round(sum(e.cost_usd for e in entries), 6),
    }


def health_lines(st: RunState) -> list[str]:
    """The seed's infrastructure errors per split, and the children's added up."""
    lines = []
    if st.seed is not None:
        for split, h in health.of_candidate(st.seed).items():
            if h.counts:
                lines.append(f"seed {health.describe(split, h)}")
    kids: dict[str, health.SplitHealth] = {}
    for c in st.candidates.values():
        if c.is_seed:
            continue
        for split, h in health.of_candidate(c).items():
            total = kids.setdefault(split, health.SplitHealth())
            total.tasks += h.tasks
            for reason, n in h.counts.items():
                total.counts[reason] = total.counts.get(reason, 0) + n
                total.examples.setdefault(reason, f"{c.id} {h.examples[reason]}")
    lines += [f"children {health.describe(s, h)}" for s, h in kids.items() if h.counts]
    return lines


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def summary_table(report: StatusReport) -> Table:
    table = Table(title=escape(f"{report.name}: {report.state}"), title_justify="left")
    table.add_column("")
    table.add_column("candidate")
    for split in ("train", "gate", "sealed"):
        table.add_column(split, justify="right")
    by_id = {c.id: c for c in report.candidates}
    for label, cid in (("seed", report.seed), ("champion", report.champion)):
        if cid is None:
            continue
        s = by_id[cid].scores
        table.add_row(label, cid, _fmt(s.train), _fmt(s.gate), _fmt(s.sealed))
    return table


BLOCKS = "▁▂▃▄▅▆▇█"
#: a candidate without a score in a sparkline (a blank would read as a missing column)
NO_SCORE = "·"


def sparkline(values: list[float | None], width: int = 100) -> str:
    """Scores in [0, 1] as block characters (:data:`NO_SCORE` where there is no score)."""
    out = []
    for v in values[-width:]:
        if v is None:
            out.append(NO_SCORE)
        else:
            out.append(BLOCKS[min(len(BLOCKS) - 1, max(0, round(v * (len(BLOCKS) - 1))))])
    return "".join(out)


def score_lines(report: StatusReport) -> list[str]:
    """Gate score per candidate, and the best admitted score so far, as sparklines."""
    gates = [c.scores.gate for c in report.candidates]
    best: list[float | None] = []
    top: float | None = None
    for c in report.candidates:
        if c.state == "admitted" and c.scores.gate is not None:
            top = c.scores.gate if top is None else max(top, c.scores.gate)
        best.append(top)
    if not any(g is not None for g in gates):
        return []
    lines = [
        f"gate per candidate  |{sparkline(gates)}|",
        f"best admitted gate  |{sparkline(best)}|",
    ]
    if None in gates or None in best:
        lines.append(
            f"{'':20}{NO_SCORE} no score: rejected or failed before its gate, or none admitted yet"
        )
    return lines


def print_summary(
    report: StatusReport, console: Console, *, listing: Table | None = None, after: str = "run"
) -> None:
    """The run's header (seed vs champion, scores, counts), ``listing`` (status's candidates
    table) under it, then models, health, notes; the last line says what to do next
    (``after``: the command that printed it, never suggested again)."""
    console.print(summary_table(report))
    for line in score_lines(report):
        console.print(line, highlight=False)
    counts = ", ".join(f"{n} {s}" for s, n in report.counts.items() if n)
    used = report.budget["used"]
    children = sum(1 for c in report.candidates if c.parent is not None)
    seed = "seed + " if report.seed is not None else ""
    limit = report.budget["limits"].get("task_runs")
    runs = f"{used.get('task_runs', 0)}" + (f"/{limit}" if limit is not None else "")
    console.print(
        f"{seed}{children} candidates (the seed is not counted in max_candidates; {counts}); "
        f"{used['evaluations']} evaluations; {runs} task runs; {used['wall_seconds']:.0f} s",
        highlight=False,
    )
    if listing is not None:
        console.print(listing)
    _print_models_and_health(report, console)
    # a reason, note or violation may quote a candidate's text: printed as is, never markup
    if report.reason:
        console.print(f"stopped: {report.reason}", markup=False)
    if report.head:
        # one unbroken line: keep it to check later with ``rsiframe verify --head``
        console.print(f"chain head: {report.head}", highlight=False, soft_wrap=True)
    for note in report.notes:
        console.print(f"note: {note}", markup=False)
    for line in report.warnings:
        console.print(f"warning: {line}", markup=False)
    for v in report.violations:
        console.print(
            f"information-flow violation: {v.get('slot')} operator {v.get('operator')} "
            f"({v.get('candidate')}) asked for {v.get('detail') or v.get('asked')}",
            highlight=False,
            markup=False,
        )
    console.print(next_steps(report, after), markup=False, highlight=False, soft_wrap=True)


def _print_models_and_health(report: StatusReport, console: Console) -> None:
    for line in model_lines(report):
        console.print(line, highlight=False, markup=False)
    for line in report.health:
        console.print(Text(f"infrastructure errors: {line}", style="red"))


def next_steps(report: StatusReport, after: str) -> str:
    """One line of commands to run next on this run, by its state, without ``after`` (the
    command that just ran): resume an unfinished run; view, check and verify an ended one."""
    where = shlex.quote(shown_path(report.path))
    head = f" --head {report.head}" if report.head else ""
    if report.state in ("interrupted", "failed"):
        steps = ["resume", "status", "view"]
    elif report.state == "running":
        steps = ["view", "status"]
    else:
        steps = ["view", "status", "verify"]
    cmds = [f"rsiframe {s} {where}" + (head if s == "verify" else "") for s in steps if s != after]
    return "next: " + "   ".join(cmds)


def calls_text(calls: int, cached: int) -> str:
    """``6 calls, 3 from cache``: what was paid and what the ledger answered, apart."""
    noun = "call" if calls == 1 else "calls"
    return f"{calls} {noun}" + (f", {cached} from cache" if cached else "")


def model_lines(report: StatusReport) -> list[str]:
    """The models' lines of the summary: the run's calls (paid and cached apart), the
    check before each session, and calls the ledger holds that no event records yet."""
    lines = []
    if report.model_calls or report.model_tokens or report.cost_usd:
        slots = ", ".join(
            f"{slot} ${row['cost_usd']:.4f}/{row['model_tokens']} tok/"
            f"{calls_text(row['model_calls'], row.get('cached_calls', 0))}"
            for slot, row in report.models_by_slot.items()
        )
        lines.append(
            f"models: ${report.cost_usd:.4f}, {report.model_tokens} tokens, "
            f"{calls_text(report.model_calls, report.model_calls_cached)} ({slots})"
        )
    if report.model_check:
        c = report.model_check
        lines.append(
            f"model check: {calls_text(c['calls'], 0)}, {c['tokens']} tokens, "
            f"${c['cost_usd']:.6f} (before each session; not charged to the budget)"
        )
    if report.unrecorded:
        u = report.unrecorded
        paid = "paid call" if u["paid"] == 1 else "paid calls"
        lines.append(
            f"{u['paid']} {paid} not yet recorded ({u['calls']} in the gateway's ledger past "
            f"the events: {u['tokens']} tokens, ${u['cost_usd']:.6f}); resume records them"
        )
    return lines


def candidate_table(report: StatusReport) -> Table:
    table = Table(title=escape(f"{report.name} ({report.run_id})"), title_justify="left")
    for col in ("id", "parent", "gen", "state", "train", "gate", "sealed", "change / reason"):
        table.add_column(
            col, justify="right" if col in ("train", "gate", "sealed") else "left", overflow="fold"
        )
    for c in report.candidates:
        why = _flag(c) + (
            c.description
            if c.state in ("admitted", "declined") or not c.reasons
            else ("; ".join(c.reasons))
        )
        table.add_row(
            c.id,
            "+".join(c.parents) or (c.parent or ""),
            str(c.generation),
            c.state,
            _fmt(c.scores.train),
            _fmt(c.scores.gate),
            _fmt(c.scores.sealed),
            escape(why[:120]),  # a candidate's own words: never Rich markup
        )
    return table
