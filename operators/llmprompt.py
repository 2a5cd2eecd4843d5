"""What model-driven operators show a model, and the Jinja2 prompt templates they render.

Each operator has a default template under ``prompts/`` (installed with the package);
a recipe overrides it with ``config: {template: path/to/file.j2}``. The template is
compiled when the recipe is validated, so a syntax error is one line from ``recipe check``.
Templates see the names :func:`mutation_context` returns (and each operator's extras).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rsiframe.api import MutateContext

PROMPTS = Path(__file__).resolve().parent / "prompts"
_ENV = jinja2.Environment(
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
)


def compile_template(path: Path) -> jinja2.Template:
    try:
        return _ENV.from_string(path.read_text())
    except OSError as exc:
        raise ValueError(f"cannot read template {path}: {exc.strerror}") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"template {path}: line {exc.lineno}: {exc.message}") from exc


class ModelOperatorConfig(BaseModel):
    """What every model-driven operator is configured with."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(description="a model declared in the recipe's models: section")
    template: Path | None = Field(None, description="prompt template file (Jinja2) to use")
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

    def render(self, default: str, **context: Any) -> str:
        path = self.template or PROMPTS / default
        try:
            return compile_template(path).render(notes=self.notes, **context)
        except jinja2.UndefinedError as exc:
            raise ValueError(f"template {path}: {exc.message}") from exc


class ContextLimits(BaseModel):
    """How much of the candidate and its evidence goes into a prompt."""

    model_config = ConfigDict(extra="forbid")
    max_file_bytes: int = Field(20_000, ge=100, description="a longer file is cut")
    max_files: int = Field(20, ge=1)
    max_failures: int = Field(5, ge=0, description="failing train trajectories shown")
    tail_chars: int = Field(1500, ge=0, description="output shown per failing trajectory")


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


def failures(trajectories: list[dict[str, Any]], limits: ContextLimits) -> list[dict]:
    rows = [t for t in trajectories if (t.get("reward") or 0.0) < 1.0]
    out = []
    for t in rows[: limits.max_failures]:
        tail = (str(t.get("stdout_tail", "")) + "\n" + str(t.get("stderr_tail", ""))).strip()
        out.append(
            {
                "task": t.get("task"),
                "reward": t.get("reward"),
                "error": t.get("error"),
                "tail": tail[-limits.tail_chars :],
            }
        )
    return out


def mutation_context(ctx: MutateContext, limits: ContextLimits) -> dict[str, Any]:
    """Everything a mutation prompt may show: files, results, failures, analysis, lessons."""
    trajectories = ctx.rollout.trajectories
    fails = failures(trajectories, limits)
    analysis = ctx.analysis.model_dump(mode="json") if ctx.analysis else None
    hints = json.dumps(fails) + json.dumps(analysis)
    files = surface_files(ctx, limits, hints)
    solved = sum(1 for t in trajectories if (t.get("reward") or 0.0) >= 1.0)
    return {
        "candidate_id": ctx.candidate_id,
        "parent": ctx.parent.id,
        "files": files,
        "single_file": files[0]["path"] if len(files) == 1 else None,
        "train": {"solved": solved, "total": len(trajectories)},
        "failures": fails,
        "analysis": analysis,
        "lessons": ctx.lessons,
    }
