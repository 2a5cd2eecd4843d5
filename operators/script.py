"""mutate ``script``: run a researcher's command in the child's work folder, sandboxed.

The command runs in the sandbox of :mod:`rsiframe.shell` (bubblewrap
unless the config says ``sandbox: auto`` or ``process``): its cwd is the work
folder, ``RSI_WORKDIR`` names it, and it sees ``RSI_CANDIDATE_ID``,
``RSI_PARENT``, ``RSI_SEED`` (an integer for its own randomness) and three
read-only input files: ``RSI_ROLLOUT_FILE``, ``RSI_ANALYSIS_FILE`` and
``RSI_LESSONS_FILE``. The first line it prints becomes the mutation's
description. A non-zero exit, a timeout or too much output rejects the child
with the output tail recorded; the isolation used goes into the mutation event.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from pydantic import Field

from rsiframe.api import MutateContext, MutateOperator, Mutation
from rsiframe.shell import SandboxOptions, failure, run_command, tail


class ScriptConfig(SandboxOptions):
    command: str | list[str] = Field(description="shell string or argv list")
    timeout_s: float = Field(600.0, gt=0, description="wall-clock limit for the command")


class ScriptFailed(RuntimeError):
    """The command failed; the candidate is rejected with this message."""


class Script(MutateOperator):
    """Mutates the candidate by running a command in its work folder (sandboxed)."""

    name = "script"
    Config = ScriptConfig
    config: ScriptConfig

    def mutate(self, ctx: MutateContext) -> Mutation:
        cfg = self.config
        with tempfile.TemporaryDirectory(prefix="rsiframe-script-") as tmp:
            t = Path(tmp)
            (t / "rollout.json").write_text(json.dumps(ctx.rollout.model_dump(mode="json")))
            analysis = ctx.analysis.model_dump(mode="json") if ctx.analysis else None
            (t / "analysis.json").write_text(json.dumps(analysis))
            (t / "lessons.txt").write_text(ctx.lessons)
            t.chmod(0o755)
            env = {
                "RSI_CANDIDATE_ID": ctx.candidate_id,
                "RSI_PARENT": ctx.parent.id,
                "RSI_SEED": str(ctx.rng.randrange(2**31)),
            }
            res, use = run_command(
                cfg.command,
                ctx.workdir,
                options=cfg,
                env=env,
                timeout=cfg.timeout_s,
                inputs=t,
                input_files={
                    "RSI_ROLLOUT_FILE": "rollout.json",
                    "RSI_ANALYSIS_FILE": "analysis.json",
                    "RSI_LESSONS_FILE": "lessons.txt",
                },
            )
        why = failure(res, cfg.timeout_s, cfg)
        if res.timed_out:
            raise TimeoutError(f"script {why} [{use.isolation}]")
        if why is not None:
            raise ScriptFailed(f"script {why} [{use.isolation}]: {tail(res, 500)}")
        lines = res.stdout.decode(errors="replace").strip().splitlines()
        description = lines[0][:200] if lines else f"script: {cfg.command}"
        return Mutation(description=description, details={"output": tail(res)}, sandbox=use)
