"""validate ``command``: run a check in the mutated work folder before committing."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from rsiframe.operators.shell import run_command, tail

from rsiframe.api import Check, ValidateContext, ValidateOperator


class CommandConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str | list[str] = Field(description="shell string or argv list; exit 0 passes")
    timeout_s: float = Field(300.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    pass_env: list[str] = Field(default_factory=list)


class Command(ValidateOperator):
    """Passes when the command exits 0 in the work folder; it must not change the tree."""

    name = "command"
    Config = CommandConfig

    def validate(self, ctx: ValidateContext) -> Check:
        res = run_command(
            self.config.command,
            ctx.workdir,
            env={**self.config.env, "RSI_WORKDIR": str(ctx.workdir)},
            pass_env=self.config.pass_env,
            timeout=self.config.timeout_s,
        )
        if res.timed_out:
            return Check(
                ok=False, reason=f"timed out after {self.config.timeout_s:g}s", output=tail(res)
            )
        ok = res.exit_code == 0
        return Check(ok=ok, reason="" if ok else f"exited with {res.exit_code}", output=tail(res))
