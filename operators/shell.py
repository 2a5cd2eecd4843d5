"""Run a researcher's command in a candidate's work folder (shared by script and validate).

The environment is rebuilt from scratch (nothing inherited but the names a
recipe passes through), the whole process group is killed on timeout, and
output is capped.
"""

from __future__ import annotations

import os
from pathlib import Path

from rsiframe.sandbox import Mount, ProcessSandbox, ProcResult


def argv_of(command: str | list[str]) -> list[str]:
    return ["sh", "-c", command] if isinstance(command, str) else list(command)


def run_command(
    command: str | list[str],
    workdir: Path,
    *,
    env: dict[str, str],
    pass_env: list[str],
    timeout: float,
) -> ProcResult:
    inherited = {k: os.environ[k] for k in pass_env if k in os.environ}
    here = Mount(workdir, str(workdir), writable=True)
    return ProcessSandbox().run(
        argv_of(command), mounts=[here], cwd=here, env={**inherited, **env}, timeout=timeout
    )


def tail(res: ProcResult, limit: int = 4000) -> str:
    text = (res.stdout.decode(errors="replace") + res.stderr.decode(errors="replace")).strip()
    return text[-limit:]
