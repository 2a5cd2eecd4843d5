"""What the report page of one run shows (``rsiframe report RUN --html FILE``), as plain data.

The page is written only from a run that passes ``verify`` (no ``--reproduce``); with
``force`` a run that fails is written anyway and every part of the page says "not
verified". Scores come from the fold (verified, bound records only), never from a
candidate's own files; everything a candidate wrote (descriptions, notes, diffs, model
answers) is data here and is escaped by the renderer (:mod:`rsiframe.study.runpage_html`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rsiframe.archive.loader import LoadedRun, load_run
from rsiframe.archive.state import Candidate
from rsiframe.audit.evidence import (
    Pager,
    Repo,
    answer_text,
    calls_of,
    diff_base,
    prompt_text,
    read_json,
)
from rsiframe.audit.report import status_of
from rsiframe.audit.verify import VerifyReport, verify
from rsiframe.errors import ReportRefused, RsiError
from rsiframe.study.compare import _curve, method_digest

SPLITS = ("train", "gate", "sealed")
#: the most of one candidate's diff, of one prompt or answer, and of its description or
#: reason, the page carries
DIFF_CHARS = 40_000
CALL_CHARS = 8_000
TEXT_CHARS = 4_000
#: a novelty operator's reason for a duplicate (operators/novelty.py)
_TWIN = re.compile(r"identical to candidate (\S+)")


@dataclass
class Verification:
    verified: bool
    forced: bool
    verdict: str
    keyid: str
    head: str
    checks: list[dict[str, str]]
    problems: list[str]


@dataclass
class Node:
    id: str
    parents: list[str]
    generation: int
    state: str
    scores: dict[str, float | None]
    description: str
    reason: str
    champion_path: bool = False
    duplicate_of: str | None = None


@dataclass
class Panel:
    rewards: dict[str, dict[str, float]]
    errors: dict[str, dict[str, str]]
    diffs: list[dict[str, str]]
    calls: list[dict[str, Any]]
    decision: dict[str, Any] | None
    certificates: list[dict[str, Any]]
    operator: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunPage:
    verification: Verification
    header: dict[str, Any]
    nodes: list[Node]
    panels: dict[str, Panel]
    curve: list[dict[str, float]]

    def data(self) -> dict[str, Any]:
        return asdict(self)


def check_run(root: Path, *, force: bool) -> tuple[VerifyReport, bool]:
    """Verify the run; refuse a run that fails unless ``force`` (then it is marked)."""
    report = verify(root)
    verified = report.verdict != "failed"
    if not verified and not force:
        failed = [c for c in report.checks if c.status == "failed"]
        first = next((c.detail for c in failed), "checks failed")
        names = ", ".join(c.name for c in failed)
        raise ReportRefused(
            f"does not verify ({names}): {first}; no report written (--force writes one "
            "marked not verified)",
            where=str(report.path),
        )
    return report, verified


def build_page(root: Path, *, force: bool = False) -> RunPage:
    report, verified = check_run(root, force=force)
    loaded = load_run(root, strict=not force)
    status = status_of(loaded)
    verification = Verification(
        verified=verified,
        forced=force and not verified,
        verdict=report.verdict,
        keyid=report.keyid,
        head=status.head,
        checks=[{"name": c.name, "status": c.status, "detail": c.detail} for c in report.checks],
        problems=report.problems[:50],
    )
    nodes = lineage(loaded)
    return RunPage(
        verification=verification,
        header=header(loaded, status.model_dump(mode="json")),
        nodes=nodes,
        panels=panels(loaded),
        curve=[
            {
                "evaluations": p.evaluations,
                "task_runs": p.task_runs,
                "cost": p.cost,
                "best_gate": p.best_gate,
            }
            for p in _curve(loaded)
        ],
    )


def header(loaded: LoadedRun, status: dict[str, Any]) -> dict[str, Any]:
    """Recipe name, digests, state, budget, usage, and seed → champion per split."""
    st = loaded.state
    resolved = loaded.paths.read_json(loaded.paths.recipe_lock).get("resolved", {})
    seed, champ = st.seed, st.champion()
    return {
        "name": st.name,
        "run_id": st.run_id,
        "method_digest": method_digest(resolved) if isinstance(resolved, dict) else "",
        "recipe_digest": st.recipe_digest,
        "taskset_fingerprint": st.taskset_fingerprint,
        "evaluator_fingerprint": st.evaluator_fingerprint,
        "isolation": st.isolation,
        "state": status["state"],
        "reason": status["reason"],
        "budget": status["budget"],
        "counts": {k: v for k, v in status["counts"].items() if v},
        "wall_seconds": st.wall_seconds(),
        "model_tokens": st.tokens,
        "cost_usd": round(st.cost, 6),
        "model_calls": st.model_calls,
        "seed": seed.id if seed else None,
        "champion": champ.id if champ else None,
        "seed_to_champion": {
            s: [seed.score(s) if seed else None, champ.score(s) if champ else None] for s in SPLITS
        },
        "operators": operators_of(resolved),
        "warnings": list(st.warnings),
        "notes": status["notes"],
    }


def operators_of(resolved: Any) -> dict[str, str]:
    """``{slot: operator}`` of the resolved recipe (what made every candidate)."""
    slots = resolved.get("slots") if isinstance(resolved, dict) else None
    if not isinstance(slots, dict):
        return {}
    return {
        str(slot): str(spec.get("operator", "")) if isinstance(spec, dict) else str(spec)
        for slot, spec in slots.items()
    }


def _cut(text: str, limit: int = TEXT_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + "\n… (cut)"


def _reason(c: Candidate) -> str:
    if c.rejected:
        stage = c.rejected.get("stage")
        return "; ".join(f"{stage}: {r}" for r in c.rejected.get("reasons", []))
    if c.abandoned:
        return c.abandoned
    return str((c.decision or {}).get("reason") or "")


def _twin(c: Candidate, first_holder: dict[str, str]) -> str | None:
    """Whose duplicate ``c`` is: an earlier candidate with the same tree, or the one
    a novelty check named."""
    if c.tree is not None and first_holder.get(c.tree, c.id) != c.id:
        return first_holder[c.tree]
    m = _TWIN.search(_reason(c)) if c.rejected else None
    return m.group(1) if m else None


def lineage(loaded: LoadedRun) -> list[Node]:
    """Every candidate in proposal order; the champion's ancestors marked."""
    st = loaded.state
    first_holder: dict[str, str] = {}
    nodes = []
    for c in st.candidates.values():
        nodes.append(
            Node(
                id=c.id,
                parents=c.parents,
                generation=c.generation,
                state=c.state,
                scores={s: c.score(s) for s in SPLITS},
                description=_cut(c.description),
                reason=_cut(_reason(c)),
                duplicate_of=_twin(c, first_holder),
            )
        )
        if c.tree is not None:
            first_holder.setdefault(c.tree, c.id)
    path = champion_path(loaded)
    for n in nodes:
        n.champion_path = n.id in path
    return nodes


def champion_path(loaded: LoadedRun) -> set[str]:
    """The champion and every ancestor it has (both parents of a merge)."""
    st = loaded.state
    champ = st.champion()
    todo = [champ.id] if champ else []
    seen: set[str] = set()
    while todo:
        cid = todo.pop()
        if cid in seen or cid not in st.candidates:
            continue
        seen.add(cid)
        todo += st.candidates[cid].parents
    return seen


def panels(loaded: LoadedRun) -> dict[str, Panel]:
    st = loaded.state
    calls: dict[str, list[dict[str, Any]]] = {}
    for d in calls_of(loaded.events):
        calls.setdefault(str(d.get("candidate")), []).append(d)
    repo = Repo(loaded.paths.repo)
    try:
        return {
            c.id: Panel(
                rewards={s: dict(r.predicate.rewards) for s in SPLITS if (r := c.record(s))},
                errors={s: dict(r.predicate.errors) for s in SPLITS if (r := c.record(s))},
                diffs=diffs_of(repo, c, st.candidates),
                calls=[call_of(loaded.paths.root, d) for d in calls.get(c.id, [])],
                decision=c.decision,
                certificates=certificates(c, loaded.verifier.keyid),
                operator=operator_of(loaded.paths.root, c),
            )
            for c in st.candidates.values()
        }
    finally:
        repo.close()


def diffs_of(repo: Repo, c: Candidate, candidates: dict[str, Candidate]) -> list[dict[str, str]]:
    """The diff against each parent (a merge: both), cut at :data:`DIFF_CHARS` in all."""
    out: list[dict[str, str]] = []
    first = candidates.get(c.parent) if c.parent else None
    old, new = diff_base(c, first)
    bases = [(c.parent or "(empty tree)", old)]
    if c.second_parent and (second := candidates.get(c.second_parent)) is not None:
        bases.append((second.id, second.commit))
    budget = DIFF_CHARS
    for parent, base in bases if new else []:
        try:
            files = repo.diff(base, str(new))
        except (RsiError, OSError, ValueError) as exc:
            out.append({"against": parent, "path": "", "kind": "error", "text": str(exc)})
            continue
        for f in files:
            text = f.text if len(f.text) <= budget else f.text[:budget] + "\n… (cut)"
            budget = max(0, budget - len(text))
            out.append({"against": parent, "path": f.path, "kind": f.kind, "text": text})
    return out


def _artifact(run: Path, digest: str | None, render: Any, raw: bool) -> str:
    if not digest:
        return "(none recorded)"
    try:
        if raw:
            pager = Pager(run, digest, page_bytes=8 << 20)
            if not pager.check():
                return f"(artifact {digest} does not match its hash)"
            text = str(render(pager.path.read_bytes()))
        else:
            text = str(render(read_json(run, digest)))
    except (RsiError, OSError, ValueError) as exc:
        return f"({exc})"
    return text if len(text) <= CALL_CHARS else text[:CALL_CHARS] + "\n… (cut)"


def call_of(run: Path, d: dict[str, Any]) -> dict[str, Any]:
    """One model call: who made it, what it cost, the prompt and the answer (cut)."""
    return {
        "seq": d.get("seq"),
        "slot": d.get("slot"),
        "model": d.get("model"),
        "status": d.get("status"),
        "cached": bool(d.get("cached")),
        "tokens": int(d.get("prompt_tokens", 0)) + int(d.get("completion_tokens", 0)),
        "cost_usd": float(d.get("cost_usd", 0.0)),
        "error": d.get("error"),
        "prompt": _artifact(run, d.get("request"), prompt_text, raw=False),
        "answer": _artifact(run, d.get("response"), answer_text, raw=True),
    }


def operator_of(run: Path, c: Candidate) -> dict[str, Any]:
    """What made the candidate: its change list, and its proposal's placement."""
    return {
        "changes": [dict(ch) for ch in c.changes][:200],
        "placement": dict(c.placement),
        "merge": c.second_parent is not None,
        "analysis": bool(c.analysis),
    }


#: what a certificate binds, shown on the page (the predicate's other fields are its result)
BINDS = (
    "run_id",
    "candidate",
    "parent_commit",
    "recipe_digest",
    "evaluator_fingerprint",
    "taskset_fingerprint",
    "split",
    "attempt",
    "isolation",
    "framework_version",
)


def certificates(c: Candidate, keyid: str) -> list[dict[str, Any]]:
    """Every evaluation attempt: a certified one with what its record binds (its
    signature verified in the fold), others with their status."""
    out = []
    for split, tries in c.attempts.items():
        for a in tries:
            row: dict[str, Any] = {"split": split, "attempt": a.attempt, "status": a.status}
            row["error"] = a.error
            if a.status == "certified" and a.record is not None:
                pred = a.record.predicate.model_dump(mode="json")
                row["signature"] = f"verified (Ed25519, key {keyid[:16]})"
                row["binds"] = {
                    "commit": a.record.commit,
                    "tree": a.record.tree,
                    **{k: pred.get(k) for k in BINDS},
                }
                row["score"] = a.record.predicate.score
            out.append(row)
    return out
