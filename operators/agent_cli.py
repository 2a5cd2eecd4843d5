"""mutate ``agent_cli``: a coding agent edits the work folder inside the mutation sandbox.

The agent runs under bubblewrap (by default) with the work folder as its only writable
mount and no network: it reaches models only through the run's gateway, whose socket is
mounted and exposed at ``$OPENAI_BASE_URL`` by ``serving.py forward`` (the key it sees,
``$OPENAI_API_KEY``, is a per-sandbox token, never a provider key). Profiles:

- ``mini-swe-agent``: ``mini`` (``pip install mini-swe-agent``), model ``openai/<name>``;
- ``codex``: ``codex exec`` (OpenAI's Codex CLI, reads ``OPENAI_BASE_URL``);
- ``claude``: ``claude -p`` (Claude Code; ``ANTHROPIC_BASE_URL`` set to the gateway,
  which passes ``/v1/messages`` to a model declared with ``api: anthropic``);
- ``opencode``: ``opencode run`` with model ``openai/<name>``;
- ``command``: any ``command``, with ``{instruction}``, ``{workdir}``, ``{model}`` and
  ``{temperature}`` filled in (shell-quoted). The operator's ``temperature`` reaches the
  agent only through ``{temperature}``: the agent makes its own model calls, at whatever
  temperature it sets (pyfix's seed agent: its ``config.yaml``, or ``--temperature T``).

The instruction is rendered from ``prompts/agent_cli.md.j2`` with the same context as
``llm_edit``. A profile whose CLI is not on PATH fails ``recipe check`` with one line
(``mini`` comes with the ``agents`` extra: ``pip install 'rsiframe[agents]'``).

With ``archive: true`` (HyperAgents' evaluation path) the agent can read the run's
archive: a read-only folder at ``$RSI_ARCHIVE`` holds ``archive.json`` (every admitted
candidate: parent, generation, description, its train score and per-task train rewards;
nothing of gate or sealed) and each candidate's surface files (``<id>/<path>``).

The transcript is kept: a writable folder outside the work tree is mounted at
``$RSI_TRANSCRIPT`` (mini-swe-agent writes its trajectory there); its files, and the
agent's output, go into the mutation's details, stored as the child's evidence.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from rsiframe import llm
from rsiframe.api import (
    CandidateView,
    MutateContext,
    MutateOperator,
    Mutation,
    RunView,
    SandboxUse,
)
from rsiframe.operators.llmprompt import ContextLimits, ModelOperatorConfig, mutation_context
from rsiframe.sandbox.bwrap import Mount, SandboxOptions, make_sandbox
from rsiframe.sandbox.mounts import WORK_INSIDE
from rsiframe.shell import failure, tail

#: where the transcript folder is seen inside the sandbox
TRANSCRIPT_INSIDE = "/rsi/transcript"
#: where the archive folder (``archive: true``) is seen inside the sandbox
ARCHIVE_INSIDE = "/rsi/archive"
PLACEHOLDER = re.compile(r"\{(instruction|workdir|model|temperature)\}")
Profile = Literal["mini-swe-agent", "codex", "claude", "opencode", "command"]

#: profile -> (the CLI it needs, the command template); {instruction} etc. are shell-quoted
PROFILES: dict[str, tuple[str, str]] = {
    "mini-swe-agent": (
        "mini",
        "MSWEA_CONFIGURED=true MSWEA_COST_TRACKING=ignore_errors "
        "LITELLM_LOCAL_MODEL_COST_MAP=True OPENAI_API_BASE=$OPENAI_BASE_URL "
        'mini --yolo --exit-immediately --cost-limit 0 -o "$RSI_TRANSCRIPT/mini.traj.json" '
        "--model openai/{model} --task {instruction}",
    ),
    "codex": (
        "codex",
        "codex exec --skip-git-repo-check --full-auto --model {model} {instruction}",
    ),
    "claude": (
        "claude",
        'ANTHROPIC_BASE_URL="${OPENAI_BASE_URL%/v1}" ANTHROPIC_API_KEY="$OPENAI_API_KEY" '
        "claude -p --dangerously-skip-permissions --model {model} {instruction}",
    ),
    "opencode": ("opencode", "opencode run --model openai/{model} {instruction}"),
}
INSTALL_HINT = {
    "mini": "pip install mini-swe-agent",
    "codex": "npm install -g @openai/codex",
    "claude": "npm install -g @anthropic-ai/claude-code",
    "opencode": "npm install -g opencode-ai",
}


class AgentCliConfig(SandboxOptions, ModelOperatorConfig, ContextLimits):
    profile: Profile = Field("mini-swe-agent", description="which coding agent to run")
    command: str | None = Field(
        None,
        description="profile command: the command line ({instruction}, {workdir}, {model}, "
        "{temperature}: this config's temperature, for an agent that takes one)",
    )
    timeout_s: float = Field(900.0, gt=0, description="wall-clock limit for the agent")
    archive: bool = Field(
        False,
        description="HyperAgents: the archive's candidates, their surface files and train "
        "results, readable (read-only) at $RSI_ARCHIVE",
    )
    archive_max: int = Field(30, ge=1, description="archive: the newest candidates shown")
    transcript_max_bytes: int = Field(
        256 << 10, ge=0, description="transcript kept per file in the mutation's evidence"
    )

    @model_validator(mode="after")
    def _runnable(self) -> AgentCliConfig:
        if self.profile == "command":
            if not self.command:
                raise ValueError("profile command needs a command")
            return self
        if self.command:
            raise ValueError(f"profile {self.profile} takes no command (use profile: command)")
        exe = PROFILES[self.profile][0]
        if find_cli(exe) is None:
            raise ValueError(
                f"profile {self.profile}: the {exe!r} command is not on PATH "
                f"(install it: {INSTALL_HINT[exe]}, or use profile: command)"
            )
        return self


def find_cli(exe: str) -> str | None:
    """``exe`` on PATH, or beside this Python (an extra's script; the sandbox's PATH has
    this environment's bin folder too)."""
    return shutil.which(exe) or shutil.which(exe, path=os.path.join(sys.prefix, "bin"))


def render_command(cfg: AgentCliConfig, instruction: str, workdir: str) -> str:
    """The shell command line a profile runs, every value shell-quoted."""
    template = cfg.command if cfg.profile == "command" else PROFILES[cfg.profile][1]
    assert template is not None
    values = {
        "instruction": instruction,
        "workdir": workdir,
        "model": cfg.model,
        "temperature": repr(cfg.temperature),
    }
    # only these four names are filled in: any other brace is the command's own (${VAR})
    return PLACEHOLDER.sub(lambda m: shlex.quote(values[m.group(1)]), template)


class AgentFailed(RuntimeError):
    """The coding agent failed (exit status, timeout, output cap); the child is rejected."""


class AgentCli(MutateOperator):
    """Runs a coding agent CLI in the sandboxed work folder, its models via the gateway."""

    name = "agent_cli"
    Config = AgentCliConfig
    config: AgentCliConfig

    def mutate(self, ctx: MutateContext) -> Mutation:
        with (
            tempfile.TemporaryDirectory(prefix="rsi-transcript-") as logs,
            tempfile.TemporaryDirectory(prefix="rsi-archive-") as archive,
        ):
            return self._mutate(ctx, Path(logs), Path(archive))

    def _mutate(self, ctx: MutateContext, logs: Path, archive: Path) -> Mutation:
        cfg = self.config
        context = mutation_context(ctx, cfg)
        extra: list[Mount] = []
        if cfg.archive:
            context["archive"] = write_archive(ctx, archive, cfg.archive_max)
            extra.append(Mount(archive, ARCHIVE_INSIDE, writable=False))
        instruction = cfg.render("agent_cli.md.j2", **context)
        sb = make_sandbox(cfg.sandbox)
        work = Mount(ctx.workdir, WORK_INSIDE, writable=True)
        transcript = Mount(logs, TRANSCRIPT_INSIDE, writable=True)
        command = render_command(cfg, instruction, sb.view(work))
        endpoint = llm.sandbox_endpoints()("agent_cli", model=cfg.model)
        argv, mounts, model_env = endpoint.harness(sb, ["sh", "-c", command])
        env = {
            **cfg.host_env(),
            **model_env,
            "RSI_WORKDIR": sb.view(work),
            "RSI_TRANSCRIPT": sb.view(transcript),
            "HOME": "/tmp",
            **({"RSI_ARCHIVE": sb.view(extra[0])} if extra else {}),
        }
        res = sb.run(
            argv,
            mounts=[work, transcript, *extra, *mounts],
            cwd=work,
            env=env,
            timeout=cfg.timeout_s,
            network=False,  # the gateway is reached through its mounted socket only
            output_limit=cfg.output_limit_bytes,
            memory_mb=cfg.memory_mb,
            output_cap=cfg.output_cap_bytes,
        )
        use = SandboxUse(**cfg.use_fields(sb.isolation, cfg.timeout_s))
        why = failure(res, cfg.timeout_s, cfg)
        if why is not None:
            raise AgentFailed(f"agent_cli {cfg.profile} {why} [{use.isolation}]: {tail(res, 500)}")
        return Mutation(
            description=f"agent_cli {cfg.profile} ({cfg.model})",
            details={
                "profile": cfg.profile,
                "model": cfg.model,
                "transcript_tail": tail(res),
                "transcript": _transcript(logs, cfg.transcript_max_bytes),
            },
            sandbox=use,
        )


def _transcript(folder: Path, cap: int) -> dict[str, str]:
    """The agent's transcript files (regular files only, each cut at ``cap`` bytes)."""
    out: dict[str, str] = {}
    for f in sorted(folder.rglob("*")):
        if f.is_file() and not f.is_symlink():
            with f.open("rb") as fh:
                out[f.relative_to(folder).as_posix()] = fh.read(cap).decode(errors="replace")
    return out


def _train(run: RunView, c: CandidateView) -> tuple[float | None, dict[str, float] | None]:
    """``c``'s train score (or the stage it stopped at) and per-task train rewards."""
    score = run.score(c.id, "train")
    if score is None and c.stopped_at is not None and c.stopped_at.startswith("train"):
        score = run.score(c.id, c.stopped_at)
    return score, run.rewards(c.id, "train")


def write_archive(ctx: MutateContext, folder: Path, limit: int) -> list[dict[str, Any]]:
    """The archive, as HyperAgents' meta agent reads it: ``archive.json`` (the newest
    ``limit`` admitted candidates with their train results only) and each one's surface
    files under ``<id>/``. Returns the rows (for the instruction)."""
    run = ctx.run
    paths = sorted(
        p.relative_to(ctx.workdir).as_posix()
        for p in ctx.workdir.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and ctx.may_change(p.relative_to(ctx.workdir).as_posix())
    )
    rows = []
    for c in sorted(run.admitted(), key=lambda c: c.generation)[-limit:]:
        score, rewards = _train(run, c)
        rows.append(
            {"id": c.id, "parent": c.parent, "generation": c.generation,
             "description": c.description, "train_score": score, "train_rewards": rewards,
             "stopped_at": c.stopped_at}
        )  # fmt: skip
        for rel in paths:
            try:
                data = run.read_file(c.id, rel)
            except (KeyError, OSError, ValueError):
                continue
            dest = folder / c.id / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    (folder / "archive.json").write_text(json.dumps(rows, indent=1))
    return rows
