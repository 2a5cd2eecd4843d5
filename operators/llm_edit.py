"""mutate ``llm_edit``: a model proposes SEARCH/REPLACE edits (or whole small files).

The prompt (template ``prompts/llm_edit.md.j2``, overridable) shows the surface files
(size-capped, the ones the failures and analysis name first), the parent's train result,
its failing trajectories, the analysis (with an ``llm_evidence`` change manifest when
there is one), the lessons and the recipe's notes, and with ``instructions_file`` the mutator's own
instructions carried in the candidate (HyperAgents: on the surface, the model may rewrite
them, so the way children are made evolves with the candidate). The answer is parsed and applied
strictly (:mod:`rsiframe.operators.edits`); a block that does not parse or match is fed
back to the model, up to ``retries`` more times, and then the child is rejected with the
reason. An edit outside the surface is applied and left for the guardrail to reject.
Calls go through the run's gateway (:func:`rsiframe.llm.current`), which meters them.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rsiframe import llm
from rsiframe.api import MutateContext, MutateOperator, Mutation
from rsiframe.operators.ahe import attribution_report
from rsiframe.operators.edits import EditError, apply_edits, parse_edits
from rsiframe.operators.llmprompt import ContextLimits, ModelOperatorConfig, mutation_context

#: the mutator's default temperature: proposals are sampled, as evolutionary code search
#: samples them (OpenEvolve, the open AlphaEvolve, defaults to 0.7 with top_p 0.95); at 0
#: the children of one parent would be the same request, the same answer, the same tree
SAMPLING_TEMPERATURE = 0.7


class LlmEditConfig(ModelOperatorConfig, ContextLimits):
    temperature: float = Field(
        SAMPLING_TEMPERATURE,
        ge=0,
        le=2,
        description="sampling temperature; the default 0.7 follows evolutionary code search "
        "(OpenEvolve's default): each child of a parent is its own sample. At 0 every child "
        "of one parent gets the same answer, and the copies are rejected as duplicates",
    )
    retries: int = Field(2, ge=0, description="times a failed edit is fed back to the model")
    whole_file_max_bytes: int = Field(
        4000, ge=0, description="files up to this size may be answered whole"
    )
    declare: bool = Field(
        False,
        description="AHE: the model declares its change(s) with the edit, per change the "
        "train tasks it should fix and the tasks it may break (returned in "
        "Mutation.details.manifest), and gets the parent's change-attribution report",
    )
    instructions_file: str | None = Field(
        None,
        description="a file of the parent's tree holding the mutator's own instructions, "
        "shown in the prompt; on the surface, the model may rewrite it (HyperAgents)",
    )


class EditRejected(RuntimeError):
    """The model's edits could not be applied after every retry; the child is rejected."""


class LlmEdit(MutateOperator):
    """Asks a declared model for SEARCH/REPLACE edits to the surface and applies them."""

    name = "llm_edit"
    Config = LlmEditConfig
    config: LlmEditConfig

    def _big(self, ctx: MutateContext, path: str) -> bool:
        """An existing file too large to be answered whole (new files always may be)."""
        p = ctx.workdir / path
        return p.is_file() and p.stat().st_size > self.config.whole_file_max_bytes

    def _instructions(self, ctx: MutateContext) -> dict[str, str] | None:
        """The candidate-carried instructions (``instructions_file``), as the parent has them."""
        name = self.config.instructions_file
        if name is None:
            return None
        p = ctx.workdir / name
        if p.is_symlink() or not p.is_file():
            raise EditRejected(f"instructions_file {name}: not a regular file in the parent")
        text = p.read_bytes()[: self.config.max_file_bytes].decode(errors="replace")
        return {"path": name, "text": text, "editable": str(ctx.may_change(name)).lower()}

    def mutate(self, ctx: MutateContext) -> Mutation:
        return self.edit(ctx, self.config.model)

    def edit(self, ctx: MutateContext, model: str) -> Mutation:
        """Ask ``model`` (a declared model) for edits and apply them."""
        cfg = self.config
        context = mutation_context(ctx, cfg)
        attribution = attribution_report(ctx.run, ctx.parent) if cfg.declare else None
        prompt = cfg.render(
            "llm_edit.md.j2",
            instructions=self._instructions(ctx),
            declare=cfg.declare,
            attribution=attribution,
            **context,
        )
        prompt += _reproposal_note(ctx)
        messages = [{"role": "user", "content": prompt}]
        client = llm.current()
        attempts: list[dict] = []
        for attempt in range(cfg.retries + 1):
            answer = client.chat(
                model, messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens
            )
            try:
                text, declared = split_manifest(answer.text) if cfg.declare else (answer.text, None)
                edits = parse_edits(text, default_path=context["single_file"])
                big = [e.path for e in edits if e.whole and self._big(ctx, e.path)]
                if big:
                    raise EditError(
                        f"{', '.join(big)}: too large to replace whole; use SEARCH/REPLACE blocks"
                    )
                changed = apply_edits(edits, ctx.workdir)
            except EditError as exc:
                attempts.append({"attempt": attempt, "error": str(exc)})
                messages += [
                    {"role": "assistant", "content": answer.text},
                    {"role": "user", "content": f"Your edit was not applied: {exc}. Try again."},
                ]
                continue
            first = answer.text.strip().splitlines()[0] if answer.text.strip() else ""
            description = first[:200] if first and "<<<<<<<" not in first else "llm_edit"
            details = {
                "model": model,
                "changed": changed,
                "edits": [{"path": e.path, "whole": e.whole} for e in edits],
                "failed_attempts": attempts,
            }
            if declared is not None:
                details["manifest"] = declared
            return Mutation(description=description, details=details)
        raise EditRejected(
            f"no applicable edit after {cfg.retries + 1} answers; last: {attempts[-1]['error']}"
        )


def _reproposal_note(ctx: MutateContext) -> str:
    """For a re-proposal (the novelty slot sent earlier ones back): why, so the model is
    not asked the same again (and the gateway does not replay its cached answer)."""
    if not ctx.rejected_as_similar:
        return ""
    said = "\n".join(f"- {r}" for r in ctx.rejected_as_similar)
    return (
        f"\nEarlier proposals for this child were rejected as too similar to existing "
        f"programs:\n{said}\nPropose a substantially different change.\n"
    )


MANIFEST = re.compile(r"CHANGE MANIFEST:?\s*```(?:json)?\s*\n(.*?)```", re.S)


class DeclaredChange(BaseModel):
    """One change as the editor declares it (AHE's change manifest entry)."""

    model_config = ConfigDict(extra="ignore")
    change: str = Field(max_length=500)
    files: list[str] = Field(default_factory=list, max_length=20)
    predicted_fixes: list[str] = Field(default_factory=list, max_length=200)
    risk_tasks: list[str] = Field(default_factory=list, max_length=200)
    decision: str = Field("", max_length=200)  # on an earlier change: keep, improve, rollback


class DeclaredManifest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    changes: list[DeclaredChange] = Field(min_length=1, max_length=10)


def split_manifest(text: str) -> tuple[str, dict]:
    """The answer without its ``CHANGE MANIFEST`` block, and the manifest; an answer
    without a valid one raises :class:`EditError` (fed back to the model)."""
    match = MANIFEST.search(text)
    if match is None:
        raise EditError("no CHANGE MANIFEST block (a fenced JSON object after the edits)")
    try:
        declared = DeclaredManifest.model_validate(json.loads(match.group(1)))
    except (ValueError, ValidationError) as exc:
        raise EditError(f"the CHANGE MANIFEST is not valid: {str(exc)[:300]}") from exc
    return text[: match.start()] + text[match.end() :], declared.model_dump(mode="json")
