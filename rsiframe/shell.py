"""Run a researcher's command in a candidate's work folder (shared by script and validate).

Sandbox policy, not an operator: the built-in ``script`` and ``validate`` operators call it,
and so may a user's own operator (``from rsiframe.shell import run_command``).

The command runs in a :mod:`rsiframe.sandbox.bwrap`: bubblewrap by default, where it
sees the system folders, the Python installation, the work folder (writable,
at ``/rsi/work``) and its input files (read-only, at ``/rsi/in``) and nothing
else: not the run folder, the signing key, other candidates, the evaluator,
the task set or ``$HOME``. ``sandbox: auto`` allows the plain process runner
where bubblewrap does not work; ``sandbox: process`` asks for it outright. The
environment is rebuilt from scratch (only the names in ``pass_env`` come from
the host, never ``RSIFRAME_*``), memory, time and output are limited, and the
whole process tree is killed at the end.

Network is off unless ``network.allow`` names endpoints (``host:port``). With
bubblewrap the network is shared or not: a non-empty allow-list turns it on for
every host, and the endpoints are recorded with the mutation, not enforced one
by one.
"""

from __future__ import annotations

from pathlib import Path

from rsiframe.api import SandboxUse
from rsiframe.sandbox.bwrap import Mount, NetworkSpec, ProcResult, SandboxOptions, make_sandbox
from rsiframe.sandbox.mounts import INPUTS_INSIDE, WORK_INSIDE


def argv_of(command: str | list[str]) -> list[str]:
    return ["sh", "-c", command] if isinstance(command, str) else list(command)


def run_command(
    command: str | list[str],
    workdir: Path,
    *,
    options: SandboxOptions,
    env: dict[str, str],
    timeout: float,
    inputs: Path | None = None,
    input_files: dict[str, str] | None = None,
) -> tuple[ProcResult, SandboxUse]:
    """Run ``command`` with ``workdir`` as its writable cwd and ``inputs`` read-only.

    ``RSI_WORKDIR`` (and ``RSI_INPUTS``) name those folders as the command sees them;
    ``input_files`` maps more variable names to file names inside ``inputs``.
    """
    sb = make_sandbox(options.sandbox)
    work = Mount(workdir, WORK_INSIDE, writable=True)
    mounts = [work]
    full_env = {**options.host_env(), **env}
    full_env["RSI_WORKDIR"] = sb.view(work)
    if inputs is not None:
        m_in = Mount(inputs, INPUTS_INSIDE)
        mounts.append(m_in)
        full_env["RSI_INPUTS"] = sb.view(m_in)
        for var, name in (input_files or {}).items():
            full_env[var] = f"{sb.view(m_in)}/{name}"
    network = bool(options.network.allow)
    res = sb.run(
        argv_of(command),
        mounts=mounts,
        cwd=work,
        env=full_env,
        timeout=timeout,
        network=network,
        output_limit=options.output_limit_bytes,
        memory_mb=options.memory_mb,
        output_cap=options.output_cap_bytes,
    )
    return res, SandboxUse(**options.use_fields(sb.isolation, timeout))


def failure(res: ProcResult, timeout: float, options: SandboxOptions) -> str | None:
    """Why the run did not succeed (timeout, output cap, exit status), or None."""
    if res.timed_out:
        return f"timed out after {timeout:g}s"
    if res.output_exceeded:
        return f"output exceeded {options.output_cap_bytes} bytes"
    if res.exit_code != 0:
        return f"exited with {res.exit_code}"
    return None


__all__ = ["NetworkSpec", "SandboxOptions", "failure", "run_command", "tail"]


def tail(res: ProcResult, limit: int = 4000) -> str:
    text = (res.stdout.decode(errors="replace") + res.stderr.decode(errors="replace")).strip()
    return text[-limit:]
