"""mutate ``script``: run a researcher's command in the child's work folder.

The command sees ``RSI_WORKDIR`` (the folder to edit, also its cwd),
``RSI_CANDIDATE_ID``, ``RSI_PARENT``, ``RSI_SEED`` (an integer for its own
randomness) and three JSON/text files outside the work folder:
``RSI_ROLLOUT_FILE``, ``RSI_ANALYSIS_FILE`` and ``RSI_LESSONS_FILE``. The first
line it prints becomes the mutation's description. A non-zero exit rejects the
child with the output tail recorded.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from rsiframe.operators.shell import run_command, tail

from rsiframe.api import MutateContext, MutateOperator, Mutation


class ScriptConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str | list[str] = Field(description="shell string or argv list")
    timeout_s: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict, description="extra environment")
    pass_env: list[str] = Field(
        default_factory=list, description="host environment variables passed through by name"
    )


class Script(MutateOperator):
    """Mutates the candidate by running a command in its work folder."""

    name = "script"
    Config = ScriptConfig

    def mutate(self, ctx: MutateContext) -> Mutation:
        with tempfile.TemporaryDirectory(prefix="rsiframe-script-") as tmp:
            t = Path(tmp)
            (t / "rollout.json").write_text(json.dumps(ctx.rollout.model_dump(mode="json")))
            analysis = ctx.analysis.model_dump(mode="json") if ctx.analysis else None
            (t / "analysis.json").write_text(json.dumps(analysis))
            (t / "lessons.txt").write_text(ctx.lessons)
            env = {
                **self.config.env,
                "RSI_WORKDIR": str(ctx.workdir),
                "RSI_CANDIDATE_ID": ctx.candidate_id,
                "RSI_PARENT": ctx.parent.id,
                "RSI_SEED": str(ctx.rng.randrange(2**31)),
                "RSI_ROLLOUT_FILE": str(t / "rollout.json"),
                "RSI_ANALYSIS_FILE": str(t / "analysis.json"),
                "RSI_LESSONS_FILE": str(t / "lessons.txt"),
            }
            res = run_command(
                self.config.command,
                ctx.workdir,
                env=env,
                pass_env=self.config.pass_env,
                timeout=self.config.timeout_s,
            )
        if res.timed_out:
            raise TimeoutError(f"script timed out after {self.config.timeout_s:g}s")
        if res.exit_code != 0:
            raise RuntimeError(f"script exited with {res.exit_code}: {tail(res, 500)}")
        lines = res.stdout.decode(errors="replace").strip().splitlines()
        description = lines[0][:200] if lines else f"script: {self.config.command}"
        return Mutation(description=description, details={"output": tail(res)})
