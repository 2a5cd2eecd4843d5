"""What model-driven operators show a model, and the Jinja2 prompt templates they render.

Each operator has a default template under ``prompts/`` (installed with the package);
a recipe overrides it with ``config: {template: path/to/file.j2}``. The template is
compiled when the recipe is validated, so a syntax error is one line from ``recipe check``.
Templates see the names :func:`mutation_context` returns (and each operator's extras).

What a mutation prompt shows of the parent's rollout is the recipe's choice, made
explicit in ``config.context`` (:class:`ShownContext`): failing and passing examples,
each with its task instruction, the agent's output and the verifier's output as feedback;
the parent's scores; the analysis; and the run-wide lessons of the reflect slot only when
a recipe asks for them (GEPA, DGM and OpenEvolve have no such cross-lineage memory, so a
comparison that gave them one would be confounded).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import jinja2
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rsiframe import llm
from rsiframe.api import InformationFlowError, MutateContext

PROMPTS = Path(__file__).resolve().parent / "prompts"


def _env(folder: Path) -> jinja2.Environment:
    """Templates include others from their own folder, then from ``prompts/`` (so a
    recipe's own template may include ``examples.md.j2``)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(folder), str(PROMPTS)]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def compile_template(path: Path) -> jinja2.Template:
    try:
        return _env(path.parent).from_string(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read template {path}: {exc.strerror}") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"template {path}: line {exc.lineno}: {exc.message}") from exc


class ModelOperatorConfig(BaseModel):
    """What every model-driven operator is configured with."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="a model declared in the recipe's models: section")
    template: Path | None = Field(None, description="prompt template file (Jinja2) to use")
    prompt: str | None = Field(
        None,
        description="a built-in template of operators/prompts/ by name, instead of the "
        "operator's own (e.g. dgm_self_improve.md.j2 for agent_cli)",
    )
    temperature: float = Field(
        0.0,
        ge=0,
        le=2,
        description="sampling temperature; 0 is deterministic (the same request, the same "
        "answer: the gateway serves a repeat from its cache)",
    )
    max_tokens: int = Field(4096, ge=1, description="answer tokens asked per call")
    notes: str = Field("", description="text the recipe adds to every prompt")
    max_tokens_per_mutation: int | None = Field(
        None, ge=1, description="tokens one operation may spend in all (the gateway enforces it)"
    )

    @field_validator("template")
    @classmethod
    def _compiles(cls, v: Path | None) -> Path | None:
        if v is not None:
            v = v.resolve()
            compile_template(v)
        return v

    @field_validator("prompt")
    @classmethod
    def _builtin(cls, v: str | None) -> str | None:
        if v is not None:
            if "/" in v or not (PROMPTS / v).is_file():
                known = ", ".join(sorted(p.name for p in PROMPTS.glob("*.j2")))
                raise ValueError(f"no built-in prompt {v!r} (built in: {known})")
            compile_template(PROMPTS / v)
        return v

    def render(self, default: str, **context: Any) -> str:
        path = self.template or PROMPTS / (self.prompt or default)
        try:
            return compile_template(path).render(notes=self.notes, **context)
        except (jinja2.UndefinedError, jinja2.TemplateNotFound) as exc:
            raise ValueError(f"template {path}: {exc.message}") from exc


T = TypeVar("T")


class Unparsed(ValueError):
    """Every answer of :func:`ask_until_parsed` failed to parse; the last reason."""


def ask_until_parsed(
    cfg: ModelOperatorConfig,
    prompt: str,
    parse: Callable[[str], T],
    *,
    retries: int,
    again: str,
    errors: tuple[type[Exception], ...] = (ValueError,),
) -> T:
    """Ask ``cfg.model`` until ``parse`` accepts an answer: each refused answer goes back
    to the model with the reason and ``again`` (``retries`` more times at most)."""
    messages = [{"role": "user", "content": prompt}]
    client = llm.current()
    error = ""
    for _ in range(retries + 1):
        answer = client.chat(
            cfg.model, messages, temperature=cfg.temperature, max_tokens=cfg.max_tokens
        )
        try:
            return parse(answer.text)
        except errors as exc:
            error = str(exc)
            messages += [
                {"role": "assistant", "content": answer.text},
                {"role": "user", "content": f"{exc}. {again}"},
            ]
    raise Unparsed(error)


def ask_for_lines(cfg: ModelOperatorConfig, prompt: str, max_lines: int, what: str) -> str:
    """One call to ``cfg.model``; its non-blank lines, at most ``max_lines``, as a text (a
    reflect operator's lessons or scratchpad). An answer with none is a ``ModelError``
    naming ``what`` was missing."""
    answer = llm.current().chat(
        cfg.model,
        [{"role": "user", "content": prompt}],
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
    )
    lines = [ln.rstrip() for ln in answer.text.strip().splitlines() if ln.strip()]
    if not lines:
        raise llm.ModelError(f"model {cfg.model!r} answered with {what}")
    return "\n".join(lines[:max_lines]) + "\n"


class ShownContext(BaseModel):
    """What of the parent's rollout and the run a mutation prompt shows (issue 31)."""

    model_config = ConfigDict(extra="forbid")
    failing: int = Field(5, ge=0, description="failing examples (train tasks not solved) shown")
    passing: int = Field(1, ge=0, description="passing examples (solved train tasks) shown")
    instruction: bool = Field(True, description="each example's task instruction")
    agent_output: bool = Field(True, description="each example's agent output (its tail)")
    feedback: bool = Field(True, description="each example's verifier output, as feedback")
    scores: bool = Field(True, description="the parent's train result and certified scores")
    analysis: bool = Field(True, description="the analyze slot's report (with one)")
    lessons: bool = Field(
        False, description="the reflect slot's run-wide lessons (only when a recipe asks)"
    )


class ContextLimits(BaseModel):
    """How much of the candidate and its evidence goes into a prompt, and which parts."""

    model_config = ConfigDict(extra="forbid")
    max_file_bytes: int = Field(20_000, ge=100, description="a longer file is cut")
    max_files: int = Field(20, ge=1, description="surface files shown at most")
    tail_chars: int = Field(1500, ge=0, description="output shown per example (each part)")
    context: ShownContext = Field(
        default_factory=ShownContext, description="what of the rollout and the run is shown"
    )


def surface_files(ctx: MutateContext, limits: ContextLimits, hints: str = "") -> list[dict]:
    """The surface's files in the work folder, most relevant first (named in ``hints``,
    then smallest), each cut at ``max_file_bytes``."""
    found = []
    for p in sorted(ctx.workdir.rglob("*")):
        rel = p.relative_to(ctx.workdir).as_posix()
        if p.is_file() and not p.is_symlink() and ".git" not in p.parts and ctx.may_change(rel):
            found.append((rel, p))
    found.sort(
        key=lambda rp: (
            rp[0] not in hints and rp[0].rsplit("/", 1)[-1] not in hints,
            rp[1].stat().st_size,
            rp[0],
        )
    )
    out = []
    for rel, p in found[: limits.max_files]:
        data = p.read_bytes()
        text = data[: limits.max_file_bytes].decode(errors="replace")
        out.append(
            {
                "path": rel,
                "text": text,
                "truncated": len(data) > limits.max_file_bytes,
                "bytes": len(data),
            }
        )
    return out


def example(t: dict[str, Any], limits: ContextLimits) -> dict[str, Any]:
    """One train task of the rollout as a prompt shows it (the parts ``context`` asks for)."""
    shown, cut = limits.context, limits.tail_chars
    output = (str(t.get("stdout_tail", "")) + "\n" + str(t.get("stderr_tail", ""))).strip()
    output = output[-cut:] if cut and shown.agent_output else ""
    feedback = str(t.get("verifier_tail") or "").strip()
    return {
        "task": t.get("task"),
        "reward": t.get("reward"),
        "solved": (t.get("reward") or 0.0) >= 1.0,
        "error": t.get("error"),
        "instruction": str(t.get("instruction") or "") if shown.instruction else "",
        "output": output,
        "tail": output,  # the name templates written before issue 31 use
        "feedback": feedback[-cut:] if cut and shown.feedback else "",
    }


def failures(trajectories: list[dict[str, Any]], limits: ContextLimits) -> list[dict]:
    """The failing examples shown (the first ``context.failing``)."""
    rows = [t for t in trajectories if (t.get("reward") or 0.0) < 1.0]
    return [example(t, limits) for t in rows[: limits.context.failing]]


def passing(trajectories: list[dict[str, Any]], limits: ContextLimits) -> list[dict]:
    """The passing examples shown (the first ``context.passing``)."""
    rows = [t for t in trajectories if (t.get("reward") or 0.0) >= 1.0]
    return [example(t, limits) for t in rows[: limits.context.passing]]


def parent_scores(ctx: MutateContext) -> dict[str, float | None]:
    """The parent's certified train and gate scores (what the slot may read)."""
    out: dict[str, float | None] = {}
    for split in ("train", "gate"):
        try:
            out[split] = ctx.run.score(ctx.parent.id, split)
        except (InformationFlowError, KeyError, AttributeError):
            out[split] = None  # not readable here (a test's stand-in view, an untrusted one)
    return out


def mutation_context(ctx: MutateContext, limits: ContextLimits) -> dict[str, Any]:
    """Everything a mutation prompt may show, as ``limits.context`` chooses: files,
    failing and passing examples, the parent's scores, the analysis, the lessons."""
    shown = limits.context
    trajectories = ctx.rollout.trajectories
    fails = failures(trajectories, limits)
    passes = passing(trajectories, limits)
    analysis = ctx.analysis.model_dump(mode="json") if ctx.analysis and shown.analysis else None
    hints = json.dumps(fails) + json.dumps(analysis)
    files = surface_files(ctx, limits, hints)
    solved = sum(1 for t in trajectories if (t.get("reward") or 0.0) >= 1.0)
    train = {"solved": solved, "total": len(trajectories)}
    return {
        "candidate_id": ctx.candidate_id,
        "parent": ctx.parent.id,
        "files": files,
        "single_file": files[0]["path"] if len(files) == 1 else None,
        "train": train if shown.scores else None,
        "scores": parent_scores(ctx) if shown.scores else {},
        "failures": fails,
        "passing": passes,
        "examples": fails + passes,
        "analysis": analysis,
        "lessons": ctx.lessons if shown.lessons else "",
    }
