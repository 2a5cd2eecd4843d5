"""validate ``command``: run a check in the mutated work folder (sandboxed) before committing."""

from __future__ import annotations

from pydantic import Field

from rsiframe.api import Check, ValidateContext, ValidateOperator
from rsiframe.shell import SandboxOptions, failure, run_command, tail


class CommandConfig(SandboxOptions):
    command: str | list[str] = Field(description="shell string or argv list; exit 0 passes")
    timeout_s: float = Field(300.0, gt=0, description="wall-clock limit for the command")


class Command(ValidateOperator):
    """Passes when the command exits 0 in the work folder; it must not change the tree."""

    name = "command"
    deterministic = True
    Config = CommandConfig
    config: CommandConfig

    def max_task_runs(self, train: int) -> int:
        return 0  # a command, no tasks

    def validate(self, ctx: ValidateContext) -> Check:
        cfg = self.config
        res, use = run_command(cfg.command, ctx.workdir, options=cfg, env={}, timeout=cfg.timeout_s)
        why = failure(res, cfg.timeout_s, cfg)
        return Check(ok=why is None, reason=why or "", output=tail(res), sandbox=use)
