"""The Harbor engine's preflight, before a run folder exists: its environment can start
here, Harbor's own venv has the pinned version, and Harbor's task loader accepts the tasks.
Imports no part of the engine itself (``recipe check`` runs only this)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rsiframe.errors import EngineUnavailable, TaskSetError
from rsiframe.evaluators.harbor import venv as harborenv
from rsiframe.recipe.evaluator import HarborEngineConfig
from rsiframe.tasks.taskset import TaskSet

_CHECK_TASKS = """
import json, sys
from harbor.models.task.task import Task
problems = []
for path in sys.argv[1:]:
    try:
        Task(path)
    except Exception as exc:
        lines = [x.strip() for x in str(exc).splitlines() if x.strip()][:3]
        problems.append([path, (type(exc).__name__ + ": " + "; ".join(lines))[:400]])
print(json.dumps(problems))
"""


def harbor_task_problems(paths: list[Path], py: str | None = None) -> list[tuple[str, str]]:
    """(task folder, why) for every folder Harbor's own task loader rejects."""
    py = py or harborenv.python()
    res = subprocess.run(
        [py, "-c", _CHECK_TASKS, *map(str, paths)],
        capture_output=True,
        text=True,
        env=harborenv.harbor_env(Path(tempfile.gettempdir())),
        timeout=300,
    )
    if res.returncode != 0:
        raise EngineUnavailable(f"Harbor cannot load tasks: {res.stderr.strip()[-300:]}")
    return [(p, why) for p, why in json.loads(res.stdout.strip().splitlines()[-1])]


def bwrap_environment_problem() -> str | None:
    """Why the bwrap environment cannot start here, or None."""
    binary = shutil.which("bwrap")
    if binary is None:
        return "the bwrap environment needs bubblewrap (apt-get install bubblewrap)"
    argv = [binary, "--unshare-all", "--unshare-user", "--cap-drop", "ALL", "--uid", "1000"]
    argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"]
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        return f"the bwrap environment cannot start: {res.stderr.strip()[-200:]}"
    if os.geteuid() == 0:  # as root it overlays the system folders: that must work too
        with tempfile.TemporaryDirectory(prefix="rsiframe-probe-") as tmp:
            for d in ("up", "wk", "mnt"):
                os.mkdir(os.path.join(tmp, d))
            opts = f"lowerdir=/usr,upperdir={tmp}/up,workdir={tmp}/wk"
            script = f"mount -t overlay overlay -o {opts} {tmp}/mnt"
            cmd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script]
            try:
                res = subprocess.run(cmd, capture_output=True, text=True)
            except OSError as exc:
                return f"the bwrap environment cannot start: unshare: {exc.strerror}"
            if res.returncode != 0:
                why = res.stderr.strip()[-200:]
                return f"the bwrap environment cannot mount its overlays: {why}"
    return None


def docker_environment_problem() -> str | None:
    """Why Harbor's docker environment cannot start here (engine down, no Compose v2)."""
    if shutil.which("docker") is None:
        return "Harbor's docker environment needs the docker CLI"
    res = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True)
    if res.returncode != 0:
        return "the Docker engine is not running (docker info failed)"
    res = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if res.returncode != 0:
        return "Harbor's docker environment needs Docker Compose v2 (docker compose)"
    return None


def preflight(config: HarborEngineConfig, taskset: TaskSet, task_ids: list[str]) -> None:
    """Everything the harbor engine needs, checked before a run folder exists."""
    problem = None
    if config.environment == "bwrap":
        problem = bwrap_environment_problem()
    elif config.environment == "docker":
        problem = docker_environment_problem()
    if problem:
        raise EngineUnavailable(problem, where="evaluator.config.environment")
    py = harborenv.python()
    found = harborenv.version_of(py)
    if found != harborenv.HARBOR_VERSION:
        raise EngineUnavailable(
            f"Harbor {harborenv.HARBOR_VERSION} is required, {py} has {found or 'none'}"
        )
    paths = [taskset.tasks[t].path for t in task_ids]
    for path, why in harbor_task_problems(paths, py):
        raise TaskSetError(f"Harbor rejects this task: {why}", where=path)
