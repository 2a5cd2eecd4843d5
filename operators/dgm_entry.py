"""analyze ``dgm_entry``: DGM's diagnosis of one entry into a problem statement.

The Darwin Gödel Machine (Zhang et al. 2025, ``jennyzzt/dgm``: ``DGM_outer.py``
``choose_selfimproves``, ``self_improve_step.py`` ``diagnose_problem``,
``prompts/self_improvement_prompt.py``) picks, per self-improvement, one *entry* of the
parent: with probability ``special`` (0.25) each, in this order, ``solve_empty_patches``
(only when at least ``empty_share`` of the parent's tasks left no change), then
``solve_stochasticity``, then ``solve_contextlength`` (only when a failed task's log shows
a context-length error); otherwise one train task the parent failed, drawn at random. A
model diagnoses that entry (a task: from the agent's code, its full log, what it changed
and the verifier's output) and answers in DGM's JSON fields; the problem statement
(``implementation_suggestion`` and ``problem_description``) is this analysis's summary and
``details.problem_statement``, the instruction of the mutation that follows (the parent's
own agent implements it: ``agent_cli`` with ``template: dgm_self_improve.md.j2``). A
parent that failed no task has no entry: the proposal is skipped.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rsiframe import llm
from rsiframe.api import (
    Analysis,
    AnalyzeContext,
    AnalyzeOperator,
    InformationFlowError,
    ProposalSkipped,
)
from rsiframe.operators.llmprompt import ModelOperatorConfig, Unparsed, ask_until_parsed

SPECIAL = ("solve_empty_patches", "solve_stochasticity", "solve_contextlength")
JSON_OBJECT = re.compile(r"\{.*\}", re.S)


class DgmEntryConfig(ModelOperatorConfig):
    code: list[str] = Field(
        default_factory=list, description="the agent's files shown to the model (its code)"
    )
    special: float = Field(0.25, ge=0, le=1, description="probability of each special entry")
    empty_share: float = Field(
        0.1, ge=0, le=1, description="share of no-change tasks that makes empty patches eligible"
    )
    context_markers: list[str] = Field(
        default_factory=lambda: ["context length", "maximum context", "too long for"],
        description="a failed task's log holding one of these makes solve_contextlength eligible",
    )
    log_chars: int = Field(250_000, ge=100, description="a longer log is clipped (DGM: 250k)")
    max_file_bytes: int = Field(20_000, ge=100, description="a longer code file is cut")
    retries: int = Field(2, ge=0, description="times an answer without DGM's JSON is re-asked")


class Diagnosis(BaseModel):
    """DGM's answer fields; the problem statement is built from the last two."""

    model_config = ConfigDict(extra="ignore")
    log_summarization: str = ""
    potential_improvements: Any = ""
    improvement_proposal: str = ""
    implementation_suggestion: str
    problem_description: str


def _failed(row: dict[str, Any]) -> bool:
    return (row.get("reward") or 0.0) < 1.0


def _empty(row: dict[str, Any]) -> bool:
    return row.get("app_changed") == []


def choose_entry(
    rows: list[dict[str, Any]], rng: random.Random, cfg: DgmEntryConfig, logs: dict[str, str]
) -> str | dict[str, Any] | None:
    """A special entry's name, a failed task's row, or None (nothing failed): DGM's order,
    each special entry eligible as DGM has it and taken with probability ``special``."""
    empty = sum(map(_empty, rows))
    if empty and empty >= cfg.empty_share * len(rows) and rng.random() < cfg.special:
        return "solve_empty_patches"
    if rng.random() < cfg.special:
        return "solve_stochasticity"
    failed = [r for r in rows if _failed(r)]
    long = any(m in logs.get(str(r["task"]), "") for r in failed for m in cfg.context_markers)
    if long and rng.random() < cfg.special:
        return "solve_contextlength"
    unresolved = [r for r in failed if not _empty(r)] or failed
    return rng.choice(unresolved) if unresolved else None


def problem_statement(d: Diagnosis) -> str:
    """DGM's problem statement: what to implement, then the issue text."""
    return f"# To implement\n\n{d.implementation_suggestion}\n\n{d.problem_description}"


def parse_diagnosis(text: str) -> Diagnosis:
    match = JSON_OBJECT.search(text)
    if match is None:
        raise ValueError("the answer holds no JSON object")
    try:
        return Diagnosis.model_validate(json.loads(match.group(0)))
    except (ValueError, ValidationError) as exc:
        raise ValueError(f"the answer is not DGM's diagnosis JSON: {exc}") from exc


class Evidence:
    """A rollout row's full evidence, read through the run view (tails when not readable)."""

    def __init__(self, ctx: AnalyzeContext, cap: int) -> None:
        self.ctx, self.cap = ctx, cap

    def _artifact(self, digest: str | None) -> str | None:
        if not digest:
            return None
        try:
            return self.ctx.run.artifact(digest).decode(errors="replace")
        except (InformationFlowError, KeyError, FileNotFoundError):
            return None  # an uncertified rollout's evidence is not readable: its tails are

    def of(self, row: dict[str, Any]) -> dict[str, Any]:
        traj = self._artifact(row.get("trajectory"))
        blobs = (json.loads(traj).get("artifacts") or {}) if traj else {}

        def full(*names: str) -> str | None:
            parts = [self._artifact(blobs.get(n)) for n in names]
            return "\n".join(p for p in parts if p) if any(p is not None for p in parts) else None

        tails = f"{row.get('stdout_tail', '')}\n{row.get('stderr_tail', '')}".strip()
        log = full("agent.stdout", "agent.stderr") or tails
        app = {k[4:]: self._artifact(v) or "" for k, v in blobs.items() if k.startswith("app/")}
        return {
            "task": row["task"],
            "reward": row.get("reward"),
            "error": row.get("error"),
            "instruction": row.get("instruction") or "",
            "log": log[-self.cap :] if len(log) > self.cap else log,
            "clipped": len(log) > self.cap,
            "changed": app,
            "verifier": full("verifier.stdout", "verifier.stderr") or row.get("verifier_tail", ""),
        }


class DgmEntry(AnalyzeOperator):
    """DGM's entry choice and diagnosis: one failed task (or a special entry) of the
    parent, diagnosed by a model into the problem statement the mutation implements."""

    name = "dgm_entry"
    Config = DgmEntryConfig
    config: DgmEntryConfig

    def analyze(self, ctx: AnalyzeContext) -> Analysis:
        cfg = self.config
        rows = ctx.rollout.trajectories
        evidence = Evidence(ctx, cfg.log_chars)
        failed = {str(r["task"]): evidence.of(r) for r in rows if _failed(r)}
        logs = {t: e["log"] for t, e in failed.items()}
        entry = choose_entry(rows, ctx.rng, cfg, logs)
        if entry is None:
            raise ProposalSkipped(f"{ctx.parent.id} failed no train task: no entry to diagnose")
        task = None if isinstance(entry, str) else failed[str(entry["task"])]
        name = entry if isinstance(entry, str) else str(entry["task"])
        prompt = cfg.render(
            "dgm_diagnose.md.j2", code=self._code(ctx), entry=name, task=task, special=task is None
        )
        d = self._diagnose(prompt)
        statement = problem_statement(d)
        return Analysis(
            summary=statement,
            details={
                "entry": name,
                "special": task is None,
                "problem_statement": statement,
                "diagnosis": d.model_dump(mode="json"),
                "model": cfg.model,
            },
        )

    def _code(self, ctx: AnalyzeContext) -> list[dict[str, str]]:
        out = []
        for path in self.config.code:
            data = ctx.run.read_file(ctx.parent.id, path)[: self.config.max_file_bytes]
            out.append({"path": path, "text": data.decode(errors="replace")})
        return out

    def _diagnose(self, prompt: str) -> Diagnosis:
        cfg = self.config
        try:
            return ask_until_parsed(
                cfg, prompt, parse_diagnosis, retries=cfg.retries,
                again="Answer with the JSON object only.",
            )  # fmt: skip
        except Unparsed as exc:
            raise llm.ModelError(f"model {cfg.model!r} gave no diagnosis: {exc}") from exc
