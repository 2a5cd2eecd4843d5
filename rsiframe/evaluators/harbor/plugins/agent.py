"""Harbor agent that runs a candidate's own harness inside the trial's environment.

Runs inside Harbor's process and imports only the standard library and Harbor. The
candidate's code never runs here: ``setup`` makes the candidate's verified export
available read-only at ``/candidate`` (the ``bwrap`` environment binds it; any other
environment gets it uploaded and made read-only), and ``run`` starts the candidate's
command through the environment's ``exec``, in the task's work folder, with the same
variables rsiframe's ``local`` engine sets (``RSI_CANDIDATE``, ``RSI_APP``, ``RSI_LOGS``,
``RSI_INSTRUCTION``, ``RSI_TASK_ID``). Its output lands in ``/logs/agent`` and a minimal
ATIF trajectory (the instruction and the command's result) in the trial's ``agent/``.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

from harbor.agents.base import BaseAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext


class CandidateAgent(BaseAgent):
    """The candidate's harness as a Harbor agent (kwargs: ``candidate_dir``, ``command``)."""

    def __init__(
        self,
        logs_dir: Path,
        *args: Any,
        candidate_dir: str = "",
        command: str = "",
        timeout_s: float | None = None,
        task_env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(logs_dir, *args, **kwargs)
        self._candidate = candidate_dir
        self._command = command
        self._timeout = float(timeout_s) if timeout_s else None
        self._task_env = dict(task_env or {})

    @staticmethod
    def name() -> str:
        return "rsiframe-candidate"

    def version(self) -> str | None:
        return "1"

    async def setup(self, environment: BaseEnvironment) -> None:
        if getattr(environment, "mounts_candidate", False):
            return
        await environment.upload_dir(self._candidate, "/candidate")
        await environment.exec("chmod -R a-w /candidate", user="root")

    async def run(
        self, instruction: str, environment: BaseEnvironment, context: AgentContext
    ) -> None:
        workdir = environment.task_env_config.workdir or "/app"
        await environment.exec("mkdir -p /rsi-task", user="root")
        ins = self.logs_dir / "instruction.md"
        ins.write_text(instruction)
        await environment.upload_file(ins, "/rsi-task/instruction.md")
        env = {
            **self._task_env,
            "RSI_CANDIDATE": "/candidate",
            "RSI_APP": workdir,
            "RSI_LOGS": "/logs",
            "RSI_INSTRUCTION": "/rsi-task/instruction.md",
            "RSI_TASK_ID": environment.environment_name,
        }
        started = time.time()
        command = f"{self._command} > /logs/agent/stdout.txt 2> /logs/agent/stderr.txt"
        timeout = int(self._timeout) if self._timeout else None
        # like the local engine: a failing or timed-out harness is recorded, then graded
        outcome: dict[str, Any] = {"exit_code": None, "timed_out": False}
        try:
            res = await environment.exec(command, cwd=workdir, env=env, timeout_sec=timeout)
            outcome["exit_code"] = res.return_code
        except RuntimeError as exc:
            outcome["timed_out"] = "timed out" in str(exc)
            outcome["error"] = str(exc)
        finally:
            outcome["seconds"] = round(time.time() - started, 4)
            (self.logs_dir / "exit.json").write_text(json.dumps(outcome))
            self._trajectory(instruction, started)

    def _trajectory(self, instruction: str, started: float) -> None:
        """A minimal ATIF trajectory: the task and the command (the harness logs its own)."""
        steps = [
            {"step_id": 1, "source": "user", "message": instruction},
            {
                "step_id": 2,
                "source": "agent",
                "message": f"ran {shlex.quote(self._command)}",
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            },
        ]
        doc = {
            "schema_version": "ATIF-v1.4",
            "session_id": self.logs_dir.parent.name,
            "agent": {"name": self.name(), "version": self.version()},
            "steps": steps,
        }
        (self.logs_dir / "trajectory.json").write_text(json.dumps(doc, indent=1))
