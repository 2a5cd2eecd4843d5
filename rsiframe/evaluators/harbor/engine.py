"""The ``harbor`` evaluator engine: a split's tasks run by Harbor itself, out of process.

rsiframe writes a Harbor job config (the split's task folders, ``n_concurrent_trials``
from ``concurrency``, the environment by name, the agent) and runs ``harbor run -c`` from
Harbor's own venv (:mod:`rsiframe.evaluators.harbor.venv`, ``HARBOR_TELEMETRY=0``). The
agent is the candidate's own harness through
:class:`rsiframe.evaluators.harbor.plugins.agent.CandidateAgent`, which starts the
candidate's command inside the environment via its ``exec`` (candidate code never runs in
Harbor's process), or a Harbor built-in agent (``harbor_agent``) whose kwargs may come from
the candidate's files (``agent_config``). Environments: ``bwrap``
(:mod:`rsiframe.evaluators.harbor.plugins.environment`, the default), ``docker`` (needs
Compose v2), and the cloud sandboxes by name with their kwargs.

Each trial's ``result.json`` becomes a :class:`~rsiframe.evaluators.local.TaskRun`: reward,
exception, phase timings, agent tokens and cost, and the trial's files (ATIF trajectory
included) as content-addressed artifacts; the whole job folder is kept as a manifest of
artifacts. Harbor's version is part of the fingerprint, so another Harbor refuses resume.

With a ``models:`` section, ``model`` names a declared model and the agent reaches it only
through the run's gateway, with this evaluation's own token (never a provider key): the
candidate's harness through the in-sandbox forwarder of :mod:`rsiframe.dth.serving` (the
endpoint's socket folder bound read-only into the ``bwrap`` environment), a built-in
agent (which calls models from Harbor's own process) through the same forwarder started
around ``harbor run`` on this host, as ``openai/<model>`` at ``$OPENAI_BASE_URL``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from rsiframe import __version__, yamlsafe
from rsiframe.certs.keys import key_dir
from rsiframe.evaluators.base import (
    EvaluationOutput,
    HarnessEndpoint,
    ModelEndpoints,
    TaskRun,
    gateway_endpoint,
)
from rsiframe.evaluators.harbor import venv as harborenv
from rsiframe.recipe.evaluator import HarborEngineConfig
from rsiframe.sandbox.bwrap import host_secrets, kill_group
from rsiframe.tasks.taskset import Task
from rsiframe.util.digest import sha256_bytes, sha256_json

TAIL = 4000


class _SamePaths:
    """Paths for :meth:`HarnessEndpoint.harness` where a folder is seen at its host path
    (Harbor's process on this host; the ``bwrap`` environment binds ``ro_binds`` there)."""

    @staticmethod
    def view(mount: Any) -> str:
        return str(mount.host)


SAME_PATHS = _SamePaths()
BWRAP_ENV = f"{harborenv.PLUGIN_PACKAGE}.environment:BwrapEnvironment"
CANDIDATE_AGENT = f"{harborenv.PLUGIN_PACKAGE}.agent:CandidateAgent"


def _code_digest() -> str:
    return sha256_bytes(Path(__file__).read_bytes() + harborenv.plugin_digest().encode())


class HarborEngine:
    """Runs tasks through Harbor (``harbor run``) from Harbor's own environment."""

    name = "harbor"
    builder = None  # no D/T/H build on this engine
    server = None

    def __init__(self, config: HarborEngineConfig, work_root: Path) -> None:
        self.config = config
        self.work_root = work_root
        # every Harbor job running now: evaluations run side by side (several candidates in
        # flight, or the seed's three splits), each polling its own job; close() ends them all
        self._procs: set[subprocess.Popen[bytes]] = set()
        self._procs_lock = threading.Lock()

    @property
    def isolation(self) -> str:
        return self.config.environment

    def protect(self, tasks: dict[str, list[Task]]) -> None:
        return None

    def lock_parts(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "config": self.config.model_dump(mode="json"),
            "isolation": self.isolation,
            "harbor": harborenv.HARBOR_VERSION,
            "framework": __version__,
        }

    def fingerprint(self) -> str:
        return sha256_json({**self.lock_parts(), "code": _code_digest()})

    def record_part(self) -> dict[str, Any]:
        """The certified record's evaluator part."""
        return {
            "engine": self.name,
            "harbor_version": harborenv.HARBOR_VERSION,
            "environment": self.config.environment,
        }

    # -- a job ----------------------------------------------------------------------

    def job_config(
        self, candidate_dir: Path, tasks: list[Task], jobs: Path, ep: HarnessEndpoint | None = None
    ) -> dict[str, Any]:
        """The Harbor job config for ``tasks`` on the exported candidate (``ep``: the
        evaluation's gateway endpoint, when the agent's model is a declared one)."""
        c = self.config
        binds: list[str] = []
        if c.agent is not None:
            kwargs: dict[str, Any] = {"candidate_dir": str(candidate_dir), "command": c.agent}
            if ep is not None:  # the harness behind the in-sandbox forwarder, like local's
                if c.environment != "bwrap":
                    raise RuntimeError(
                        "a candidate agent reaches the run's gateway in the bwrap environment "
                        f"only, not {c.environment}"
                    )
                argv, mounts, env = ep.harness(SAME_PATHS, ["sh", "-c", c.agent])
                kwargs |= {"command": shlex.join(argv), "task_env": env}
                binds = [str(m.host) for m in mounts]
            if c.agent_timeout_s:
                kwargs["timeout_s"] = c.agent_timeout_s
            agent: dict[str, Any] = {"import_path": CANDIDATE_AGENT, "kwargs": kwargs}
        else:
            agent = {"name": c.harbor_agent, "kwargs": self._builtin_kwargs(candidate_dir)}
            if c.model:  # a declared model: the gateway's name, through the forwarder
                agent["model_name"] = f"openai/{c.model}" if ep is not None else c.model
            if c.agent_timeout_s:
                agent["max_timeout_sec"] = c.agent_timeout_s
        if c.environment == "bwrap":
            env_kwargs = {
                "bwrap": shutil.which("bwrap") or "bwrap",
                "ro_binds": sorted(
                    {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), *binds}
                ),
                "path": ":".join(
                    dict.fromkeys(
                        [
                            os.path.join(sys.prefix, "bin"),
                            os.path.join(sys.base_prefix, "bin"),
                            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        ]
                    )
                ),
                "hide": [str(key_dir()), *map(str, host_secrets())],
                "run_dockerfile": c.run_dockerfile,
                "output_limit_bytes": c.output_limit_bytes,
                **c.environment_kwargs,
            }
            if c.agent is not None:
                env_kwargs["candidate_dir"] = str(candidate_dir)
            environment: dict[str, Any] = {"import_path": BWRAP_ENV, "kwargs": env_kwargs}
        else:
            environment = {"type": c.environment, "kwargs": dict(c.environment_kwargs)}
        verifier: dict[str, Any] = {}
        if c.verifier_timeout_s:
            verifier["max_timeout_sec"] = c.verifier_timeout_s
        return {
            "job_name": "job",
            "jobs_dir": str(jobs),
            "n_concurrent_trials": c.concurrency,
            "quiet": True,
            "tasks": [{"path": str(t.path.resolve())} for t in tasks],
            "agents": [agent],
            "environment": environment,
            "verifier": verifier,
        }

    def _builtin_kwargs(self, candidate_dir: Path) -> dict[str, Any]:
        kwargs = dict(self.config.agent_kwargs)
        if self.config.agent_config:
            path = candidate_dir / self.config.agent_config
            try:  # the candidate's file: no aliases (a few lines would fill the job's JSON)
                loaded = yamlsafe.load_file(path) or {}
            except (OSError, ValueError, yaml.YAMLError) as exc:
                why = " ".join(str(exc).split())  # one line
                raise RuntimeError(f"agent_config {self.config.agent_config}: {why}") from exc
            if not isinstance(loaded, dict):
                raise RuntimeError(f"agent_config {self.config.agent_config}: not a mapping")
            kwargs.update(loaded)
        for k, v in list(kwargs.items()):
            if isinstance(v, str) and v.startswith("candidate:"):
                kwargs[k] = str(candidate_dir / v.removeprefix("candidate:"))
        return kwargs

    def run(
        self,
        candidate_dir: Path,
        tasks: list[Task],
        put: Callable[[bytes], str],
        on_done: Callable[[TaskRun], None] | None = None,
        *,
        on_built: Callable[[dict[str, Any]], None] | None = None,
        on_usage: Callable[[dict[str, int]], None] | None = None,
        token_limit: int | None = None,
        model_endpoint: ModelEndpoints | None = None,
    ) -> EvaluationOutput:
        """Run ``tasks`` as one Harbor job; each trial's outcome goes to ``on_done`` as it
        finishes, and the job folder becomes evidence (no D/T/H build here: ``on_built``,
        ``on_usage`` and ``token_limit`` are never called)."""
        # a model name without models: is Harbor's own business (no gateway hook then)
        ep = gateway_endpoint(self.config.model, model_endpoint) if model_endpoint else None

        py = harborenv.python()
        self.work_root.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="harbor-", dir=self.work_root))
        try:
            plugins = harborenv.stage_plugins(root / "plugins")
            config = self.job_config(candidate_dir, tasks, root / "jobs", ep)
            (root / "job.json").write_text(json.dumps(config, indent=1))
            by_path = {str(t.path.resolve()): t for t in tasks}
            out = EvaluationOutput()
            seen: set[str] = set()

            def collect() -> None:
                for trial in sorted((root / "jobs" / "job").glob("*__*")):
                    if trial.name in seen or not _finished(trial):
                        continue
                    seen.add(trial.name)
                    run, blobs = self._trial_run(trial, by_path)
                    refs = {name: put(data) for name, data in blobs.items()}
                    run.trajectory["artifacts"] = refs
                    run.trajectory_digest = put(json.dumps(run.trajectory, sort_keys=True).encode())
                    out.runs[run.task_id] = run
                    out.task_seconds += run.seconds
                    if on_done is not None:
                        on_done(run)

            log = root / "harbor.log"
            code = self._harbor(py, root / "job.json", plugins, log, collect, ep)
            collect()
            missing = [t.id for t in tasks if t.id not in out.runs]
            if missing:
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError(
                    f"Harbor (exit {code}) gave no result for {', '.join(missing)}: "
                    + " | ".join(tail)
                )
            job_manifest = self._job_evidence(root / "jobs" / "job", put)
            for run in out.runs.values():
                run.trajectory.setdefault("harbor", {})["job"] = job_manifest
            return out
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def _harbor(
        self,
        py: str,
        config: Path,
        plugins: Path,
        log: Path,
        poll: Callable[[], None],
        ep: HarnessEndpoint | None = None,
    ) -> int:
        argv = [py, "-m", "harbor.cli.main", "run", "-c", str(config), "-y", "-q"]
        env = harborenv.harbor_env(plugins)
        if ep is not None and self.config.agent is None:
            # a built-in agent calls its model from Harbor's process: behind the forwarder
            argv, _mounts, model_env = ep.harness(SAME_PATHS, argv)
            env = {**env, **model_env}
        with open(log, "wb") as f, self._procs_lock:  # close() sees it once started
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(config.parent),
                start_new_session=True,
            )
            self._procs.add(proc)
        try:
            while proc.poll() is None:
                time.sleep(0.2)
                poll()
        finally:
            _kill(proc)
            with self._procs_lock:
                self._procs.discard(proc)
        return proc.returncode

    def _trial_run(self, trial: Path, by_path: dict[str, Task]) -> tuple[TaskRun, dict[str, bytes]]:
        res = json.loads((trial / "result.json").read_text())
        path = str(Path((res.get("task_id") or {}).get("path") or "").resolve())
        task = by_path.get(path)
        if task is None:
            raise RuntimeError(f"Harbor ran a task rsiframe did not ask for: {path}")
        rewards = (res.get("verifier_result") or {}).get("rewards") or {}
        reward, error = _reward(rewards)
        exc = res.get("exception_info")
        exit_info = _json(trial / "agent" / "exit.json")
        if exc:
            error = f"{exc.get('exception_type')}: {exc.get('exception_message', '')}".strip()
        elif exit_info.get("timed_out"):
            error = f"agent timed out: {exit_info.get('error', '')}" + (
                f"; {error}" if error else ""
            )
        elif exit_info.get("exit_code") and error is None:
            last = _tail(trial / "agent" / "stderr.txt").strip().splitlines()
            error = f"agent exited with status {exit_info['exit_code']}" + (
                f": {last[-1]}" if last else ""
            )
        timings = {
            phase: _seconds(res.get(phase))
            for phase in ("environment_setup", "agent_setup", "agent_execution", "verifier")
        }
        limit = self.config.output_limit_bytes
        blobs = {
            "harbor/" + f.relative_to(trial).as_posix(): f.read_bytes()[:limit]
            for f in sorted(trial.rglob("*"))
            if f.is_file() and not f.is_symlink()
        }
        # the local engine's names for the same streams, so readers need not know the engine
        for name, rel in (
            ("agent.stdout", "agent/stdout.txt"),
            ("agent.stderr", "agent/stderr.txt"),
            ("verifier.stdout", "verifier/test-stdout.txt"),
        ):
            blobs[name] = blobs.get("harbor/" + rel, b"")
        trajectory = {
            "task": task.id,
            "reward": reward,
            "error": error,
            "agent": {
                "exit_code": exit_info.get("exit_code"),
                "timed_out": bool(exit_info.get("timed_out")),
                "seconds": timings["agent_execution"],
                "stdout_tail": _tail(trial / "agent" / "stdout.txt"),
                "stderr_tail": _tail(trial / "agent" / "stderr.txt"),
            },
            "verifier": {
                "seconds": timings["verifier"],
                "stdout_tail": _tail(trial / "verifier" / "test-stdout.txt"),
            },
            "harbor": {
                "trial": trial.name,
                "rewards": rewards,
                "exception": exc,
                "timings": timings,
                "agent_result": res.get("agent_result"),
                "agent": res.get("agent_info"),
            },
        }
        # what the bwrap environment left out of the verifier's copies (the local engine's key)
        grading = _json(trial / "rsiframe-grading.json")
        for key in ("app_removed", "agent_logs_removed"):
            if grading.get(key):
                trajectory[key] = grading[key]
        seconds = _seconds(
            {"started_at": res.get("started_at"), "finished_at": res.get("finished_at")}
        )
        return TaskRun(task.id, reward, error, trajectory, seconds=seconds), blobs

    def _job_evidence(self, job: Path, put: Callable[[bytes], str]) -> str:
        """Every file of Harbor's job folder as an artifact; returns the manifest's digest."""
        limit = self.config.output_limit_bytes
        files = {
            f.relative_to(job).as_posix(): put(f.read_bytes()[:limit])
            for f in sorted(job.rglob("*"))
            if f.is_file() and not f.is_symlink()
        }
        return put(json.dumps({"harbor_job": files}, sort_keys=True).encode())

    def close(self) -> None:
        with self._procs_lock:
            procs = list(self._procs)
        for proc in procs:
            _kill(proc)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    kill_group(proc)  # its whole session
    proc.wait()


def _finished(trial: Path) -> bool:
    data = _json(trial / "result.json")
    return bool(data.get("finished_at"))


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-TAIL:].decode(errors="replace")
    except OSError:
        return ""


def _seconds(span: dict[str, Any] | None) -> float:
    if not span or not span.get("started_at") or not span.get("finished_at"):
        return 0.0
    start = datetime.fromisoformat(str(span["started_at"]).replace("Z", "+00:00"))
    end = datetime.fromisoformat(str(span["finished_at"]).replace("Z", "+00:00"))
    return round((end - start).total_seconds(), 4)


def _reward(rewards: dict[str, Any]) -> tuple[float, str | None]:
    """The local engine's rule: ``reward`` if present, else the mean of numeric values."""
    if isinstance(rewards.get("reward"), int | float):
        return float(rewards["reward"]), None
    nums = [float(v) for v in rewards.values() if isinstance(v, int | float)]
    if nums:
        return sum(nums) / len(nums), None
    return 0.0, "verifier wrote no reward"


# -- preflight ----------------------------------------------------------------------
