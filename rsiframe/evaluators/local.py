"""The ``local`` evaluator engine: run a candidate on Harbor-format tasks in a sandbox.

Each task runs in a trial folder (:mod:`rsiframe.evaluators.trialfolders`: the folders the
phases write are fresh every trial; the instruction and tests are kept for the task's next
trial and checked against the task before each phase reads them). The agent phase sees
the candidate export read-only at ``/candidate``, the task's ``environment/`` files at ``/app``, the
instruction at ``/task/instruction.md`` and a writable ``/logs/agent``; it
never sees the tests. When the agent and every process it started are gone, the
verifier phase runs ``bash /tests/test.sh`` with the tests mounted read-only, the
candidate read-only at ``/candidate`` (so a verifier can measure the candidate itself
rather than trust what its agent reports), a freshly created ``/logs/verifier`` and its
own copies of ``/app`` and ``/logs/agent`` (:mod:`rsiframe.sandbox.appcopy`: links that
leave them and special files dropped and named in the trajectory, hard links broken), so
nothing the agent wrote or linked can become its reward. Paths are also given as environment
variables (``RSI_APP``, ``RSI_CANDIDATE``, ``RSI_LOGS``, ``RSI_TESTS``) so the
process fallback, which cannot remap paths, works for tasks that use them.

With a ``build`` config (the D/T/H target) the evaluator first builds the
candidate's model (:mod:`rsiframe.dth.build`: data step, contamination audit, train
step; cached by input digests), opens an endpoint for it on the long-lived model
server (:mod:`rsiframe.dth.serving`), and runs the agent behind an in-sandbox forwarder
that exposes that endpoint, and nothing else, at ``$OPENAI_BASE_URL`` with the
model name in ``$RSI_MODEL``. The server meters the tokens of each evaluation.
With ``model`` (a model the recipe declares) the agent reaches that model the same way,
through the run's model gateway (:mod:`rsiframe.gateway.app`): each evaluation gets its own
socket and token (never a provider key), and the gateway meters every call to the
candidate under slot ``evaluate``.

The evaluator is framework-owned: operators never call it directly, and its
fingerprint (engine, config, code, isolation) is locked at run start.
"""

from __future__ import annotations

import itertools
import json
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe import __version__
from rsiframe.dth import serving
from rsiframe.dth.build import Builder, BuildRejected, Built
from rsiframe.dth.contamination import AuditResult, Item, audit, protected_items
from rsiframe.dth.serving import ModelRefused, ModelServer
from rsiframe.evaluators import appdiff, trialfolders
from rsiframe.evaluators.base import (
    EvaluationOutput,
    HarnessEndpoint,
    ModelEndpoints,
    Put,
    TaskRun,
    gateway_endpoint,
    parse_reward,
)
from rsiframe.recipe.evaluator import LocalEngineConfig, TaskLimits
from rsiframe.sandbox import appcopy, taskimage
from rsiframe.sandbox import docker as docker_sandbox
from rsiframe.sandbox.bwrap import Limits, Mount, ProcResult, Sandbox, kill_all, make_sandbox
from rsiframe.tasks.taskset import Task
from rsiframe.util import faults
from rsiframe.util.cpuslots import cpu_slot
from rsiframe.util.digest import sha256_bytes, sha256_json
from rsiframe.util.safefile import UnsafeFile, read_regular

TAIL = 4000
_SKIP_ENV_FILES = {"Dockerfile", "docker-compose.yaml", "docker-compose.yml"}


def _code_digest() -> str:
    """The code that decides a score: this engine, the shared reward parsing (base), the
    sandbox, the verifier's copy of /app, the D/T/H build and the model server."""
    from rsiframe.dth import build, contamination
    from rsiframe.evaluators import base
    from rsiframe.sandbox import appcopy, cgroups
    from rsiframe.sandbox import bwrap as sandbox

    modules = (base, sandbox, cgroups, appcopy, build, contamination, serving, taskimage)
    sources = [Path(__file__).read_bytes(), *(Path(str(m.__file__)).read_bytes() for m in modules)]
    return sha256_bytes(b"\0".join(sources))


class LocalEngine:
    """Runs tasks on this host, each in its own sandboxed trial folder."""

    name = "local"

    def __init__(
        self,
        config: LocalEngineConfig,
        work_root: Path,
        cache_root: Path | None = None,
        *,
        parallel: int = 1,
    ) -> None:
        """``cache_root`` replaces the shared build cache (``verify --reproduce --rebuild``
        passes an empty one, so everything is built again); ``parallel``: the evaluations
        that may run at once (candidates in flight), which share one pool of tasks."""
        self.config = config
        self.work_root = work_root
        #: one trial folder per task and trial at once, kept between the task's trials
        self.folders = trialfolders.TrialFolders(work_root)
        self.sandbox: Sandbox = make_sandbox(config.sandbox)
        #: docker: a task whose environment/Dockerfile adds packages runs in its own image
        self.images = taskimage.TaskImages(self.sandbox)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        #: evaluations that may run at once (candidates in flight); each runs at most
        #: ``config.concurrency`` tasks at a time, so the two compose
        self.parallel = parallel
        self.builder: Builder | None = None
        self.server: ModelServer | None = None
        self._items: list[Item] = []
        self.protected: dict[str, list[str]] = {}  # split -> task ids given to protect()
        if config.build is not None:
            b = config.build
            self.builder = Builder(b, self.sandbox, work_root, cache_root)
            self.server = ModelServer(
                self.sandbox,
                self.builder.models_root,
                backend=b.serve.backend,
                threads=b.threads,
                max_batch=b.serve.max_batch,
                max_tokens=b.serve.max_tokens,
                max_request_tokens=b.serve.max_request_tokens,
                memory_mb=b.serve.memory_mb,
                start_timeout_s=b.serve.start_timeout_s,
                cancel=not faults.off("serve_cancel"),  # off: the self-test's proof only
            )

    def protect(self, tasks: dict[str, list[Task]]) -> None:
        """The gate and sealed tasks whose items training data must not contain."""
        self._items = protected_items(tasks)
        self.protected = {s: [t.id for t in ts] for s, ts in tasks.items()}

    def _audit(self, texts: Iterable[str]) -> AuditResult:
        assert self.config.build is not None
        return audit(texts, self._items, self.config.build.contamination)

    @property
    def isolation(self) -> str:
        return self.sandbox.isolation

    def lock_parts(self) -> dict[str, Any]:
        """What the fingerprint covers besides the code: these are named in evaluator.lock.json."""
        parts = {
            "engine": self.name,
            "config": self.config.model_dump(mode="json"),
            "isolation": self.isolation,
            "framework": __version__,
        }
        if isinstance(self.sandbox, docker_sandbox.DockerSandbox):  # another image: resume refused
            parts["image"] = self.sandbox.image_id
        return parts

    def fingerprint(self) -> str:
        return sha256_json({**self.lock_parts(), "code": _code_digest()})

    def record_part(self) -> dict[str, Any] | None:
        """The certified record's evaluator part: the Docker image a container ran from
        (none for bubblewrap and the process runner)."""
        record = getattr(self.sandbox, "record", None)
        if record is None:
            return None
        images = self.images.record()
        return {"engine": self.name, **record(), **({"task_images": images} if images else {})}

    def run(
        self,
        candidate_dir: Path,
        tasks: list[Task],
        put: Put,
        on_done: Callable[[TaskRun], None] | None = None,
        *,
        on_built: Callable[[dict[str, Any]], None] | None = None,
        on_usage: Callable[[dict[str, int]], None] | None = None,
        token_limit: int | None = None,
        model_endpoint: ModelEndpoints | None = None,
    ) -> EvaluationOutput:
        """Run every task (concurrently, per config) and return their outcomes.

        With ``model`` set, ``model_endpoint`` (from the run's gateway) opens this
        evaluation's way to it: one socket and token, mounted into each task's agent
        sandbox behind the in-sandbox forwarder, exactly like a D/T/H model.

        With a build config: build (or reuse) the model first — :class:`BuildRejected`
        when the candidate's build fails by its own fault — report it to ``on_built``,
        serve it for these tasks with at most ``token_limit`` tokens, and report the
        tokens used to ``on_usage`` (also when a task fails).
        """
        if self.builder is None or self.server is None:
            return self._run(
                candidate_dir,
                tasks,
                put,
                on_done,
                gateway_endpoint(self.config.model, model_endpoint),
            )
        self.server.start()  # torch loads in the server while the build runs
        built = self.build_model(candidate_dir, put)
        record = built.record()
        if on_built is not None:
            on_built(record)
        return self.run_model(
            candidate_dir,
            tasks,
            put,
            on_done,
            model=(record, built.model.dir),
            on_usage=on_usage,
            token_limit=token_limit,
        )

    def build_model(self, candidate_dir: Path, put: Put) -> Built:
        """Build (or reuse) the candidate's model: :class:`BuildRejected` on its own fault.
        A Ray executor runs this as a task of its own (``resources.build``)."""
        assert self.builder is not None
        with cpu_slot(self.builder.config.threads):  # builds share the machine's cores
            return self.builder.build(candidate_dir, put, self._audit if self._items else None)

    def run_model(
        self,
        candidate_dir: Path,
        tasks: list[Task],
        put: Put,
        on_done: Callable[[TaskRun], None] | None,
        *,
        model: tuple[dict[str, Any], Path],
        on_usage: Callable[[dict[str, int]], None] | None = None,
        token_limit: int | None = None,
    ) -> EvaluationOutput:
        """Serve a built model (its record, and its folder under the server's models root)
        for these tasks with at most ``token_limit`` tokens; report the tokens used to
        ``on_usage`` (also when a task fails)."""
        assert self.server is not None
        record, model_dir = model
        self.server.start()
        try:
            ep = self.server.open(uuid.uuid4().hex[:12], model_dir, record["name"], token_limit)
        except ModelRefused as exc:
            raise BuildRejected("model", f"the server cannot load the model: {exc}") from exc
        usage: dict[str, int] | None = None
        try:
            out = self._run(candidate_dir, tasks, put, on_done, ep)
        finally:
            usage = self.server.close_endpoint(ep)
            if on_usage is not None:
                on_usage(usage)
        out.usage = usage
        out.model = {
            **record,
            "tokens": usage,
            "backend": self.server.backend_used,
            "server_isolation": self.server.sandbox.isolation,
        }
        return out

    def _run(
        self,
        candidate_dir: Path,
        tasks: list[Task],
        put: Put,
        on_done: Callable[[TaskRun], None] | None,
        ep: HarnessEndpoint | None,
    ) -> EvaluationOutput:
        out = EvaluationOutput()
        if self.config.concurrency == 1:
            # one task at a time: on this thread (a hand-off to the trial pool and back
            # cost two thread wake-ups per task; evaluations in flight are at most K, so
            # the bound on trials at once is the same)
            for t in tasks:
                self._collect(out, *self._trial(candidate_dir, t, ep), put, on_done)
            return out
        with self._pool_lock:
            if self._pool is None:
                size = self.config.concurrency * self.parallel
                self._pool = ThreadPoolExecutor(size, thread_name_prefix="trial")
            pool = self._pool
        # at most config.concurrency of this evaluation's tasks at once (a window)
        todo = iter(tasks)
        first = _take(todo, self.config.concurrency)
        futures = [pool.submit(self._trial, candidate_dir, t, ep) for t in first]
        running = set(futures)
        try:
            while running:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for t in _take(todo, len(done)):
                    fut = pool.submit(self._trial, candidate_dir, t, ep)
                    futures.append(fut)
                    running.add(fut)
                for fut in done:
                    self._collect(out, *fut.result(), put, on_done)
        except BaseException as exc:
            for fut in futures:
                fut.cancel()
            if self.parallel == 1 or isinstance(exc, KeyboardInterrupt):
                kill_all()  # with candidates in flight, the others' trials are not ours to kill
            wait(futures)
            raise
        return out

    @staticmethod
    def _collect(
        out: EvaluationOutput,
        run: TaskRun,
        blobs: dict[str, bytes],
        put: Put,
        on_done: Callable[[TaskRun], None] | None,
    ) -> None:
        """A finished trial into ``out``: its artifacts stored (by the coordinating thread
        only), its trajectory's digest, then ``on_done``."""
        refs = {name: put(data) for name, data in blobs.items()}
        run.trajectory["artifacts"] = refs
        run.trajectory_digest = put(json.dumps(run.trajectory, sort_keys=True).encode())
        out.runs[run.task_id] = run
        out.task_seconds += run.seconds
        if on_done:
            on_done(run)

    def close(self) -> None:
        self.folders.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self.server is not None:
            self.server.stop()

    def _trial(
        self, candidate_dir: Path, task: Task, ep: HarnessEndpoint | None = None
    ) -> tuple[TaskRun, dict[str, bytes]]:
        faults.reached("stage:task")
        trial = self.folders.take(task.id, task.instruction)
        ran: list[ProcResult] = []
        try:
            return self._trial_in(trial, candidate_dir, task, ep, ran)
        finally:
            # what the phases wrote: deleted aside (the folders kept, emptied, only where
            # every process of every phase is known gone)
            sealed = bool(ran) and all(r.sealed for r in ran)
            self.folders.give_back(task.id, trial, sealed=sealed)

    def _trial_in(
        self,
        trial: Path,
        candidate_dir: Path,
        task: Task,
        ep: HarnessEndpoint | None,
        ran: list[ProcResult],
    ) -> tuple[TaskRun, dict[str, bytes]]:
        t = self._prepare(trial, candidate_dir, task)
        app_before = appdiff.scan(t.app)
        agent = self._run_agent(t, ep)
        ran.append(agent)
        if agent.limit:
            return self._breach(task, agent, f"agent exceeded a limit: {agent.limit}")
        app_out = appdiff.changes_since(t.app, app_before)  # evidence, before the verifier runs
        try:
            removed = self._freeze_for_verifier(t)
        except appcopy.AppTooLarge as exc:
            return self._breach(task, agent, f"agent exceeded a limit: {exc}")
        verifier = self._run_verifier(t)
        ran.append(verifier)
        reward, error = self._verdict(t, agent, verifier, app_out.touched)
        blobs = {
            "agent.stdout": agent.stdout,
            "agent.stderr": agent.stderr,
            "verifier.stdout": verifier.stdout,
            "verifier.stderr": verifier.stderr,
        }
        dropped = self._agent_logs(t.logs / "agent", t.limits.artifacts_mb << 20, blobs)
        blobs.update(app_out.blobs)  # what the agent changed under /app (capped)
        trajectory = {
            "task": task.id,
            "reward": reward,
            "error": error,
            "agent": _phase(agent),
            "verifier": _phase(verifier),
            "app": app_out.manifest(),
        }
        if task.id in self.images.built:  # the image its trials ran in (sandbox: docker)
            trajectory["image"] = {
                "isolation": t.sb.isolation,
                **self.images.built[task.id].record(),
            }
        trajectory.update({k: v for k, v in removed.items() if v})
        if dropped:
            trajectory["artifacts_dropped"] = dropped
        seconds = agent.duration_s + verifier.duration_s
        return TaskRun(task.id, reward, error, trajectory, seconds=seconds), blobs

    def _prepare(self, trial: Path, candidate_dir: Path, task: Task) -> _Trial:
        """The trial's folders: the task's environment as /app, the agent's log folder,
        the instruction; its sandbox and limits."""
        app = self.folders.fresh(trial / "app")
        env_src = task.path / "environment"
        if env_src.is_dir():
            shutil.copytree(
                env_src,
                app,
                symlinks=True,
                ignore=lambda d, names: [n for n in names if n in _SKIP_ENV_FILES],
                dirs_exist_ok=True,
            )
        logs = trial / "logs"
        self.folders.fresh(logs / "agent")
        task_info = trial / "task"  # the instruction, written by TrialFolders.take
        limits = self.config.limits.of(task)
        sb = self.images.for_task(task.id, task.path)
        return _Trial(
            trial, task, sb, app, logs, task_info, Mount(candidate_dir, "/candidate"), limits
        )

    def _run_agent(self, t: _Trial, ep: HarnessEndpoint | None) -> ProcResult:
        sb, m_app = t.sb, Mount(t.app, "/app", writable=True)
        m_task = Mount(t.task_info, "/task")
        argv = ["sh", "-c", self.config.agent]
        mounts = [t.candidate, m_app, m_task, Mount(t.logs / "agent", "/logs/agent", writable=True)]
        model_env: dict[str, str] = {}
        if ep is not None:  # the endpoint's folder only, behind the in-sandbox forwarder
            argv, extra, model_env = ep.harness(sb, argv)
            mounts += extra
        env = {
            **t.task.agent_env,
            **t.common_env(m_app),
            **model_env,
            "RSI_CANDIDATE": sb.view(t.candidate),
            "RSI_INSTRUCTION": sb.view(m_task) + "/instruction.md",
        }
        cap = t.limits.app_mb << 20
        return sb.run(
            argv,
            mounts=mounts,
            cwd=m_app,
            env=env,
            timeout=self._agent_timeout(t.task),
            network=t.task.agent_network,
            output_limit=self.config.output_limit_bytes,
            limits=t.sandbox_limits(((t.app, cap), (t.logs / "agent", cap))),
        )

    def _freeze_for_verifier(self, t: _Trial) -> dict[str, list[dict[str, Any]]]:
        """The verifier's own copies of /app and /logs/agent, made after every agent process
        is gone: links out of them (to the tests, the verifier's logs, the host) and special
        files are dropped and named in the evidence, hard links are broken by copying; and
        a fresh verifier folder (whatever the agent left under /logs/verifier is gone)."""
        cap = t.limits.app_mb << 20
        fresh = self.folders.fresh
        app_removed = appcopy.freeze(t.app, fresh(t.verifier_app), max_bytes=cap)
        logs_removed = appcopy.freeze(t.logs / "agent", fresh(t.verifier_agent_logs), max_bytes=cap)
        fresh(t.logs / "verifier")
        # the tests kept from the task's last trial, checked (and copied anew where they
        # differ) only now that every process of the agent is gone
        trialfolders.sync_tree(t.task.path / "tests", t.tests)
        return {
            "app_removed": [r.as_dict() for r in app_removed],
            "agent_logs_removed": [r.as_dict() for r in logs_removed],
        }

    def _run_verifier(self, t: _Trial) -> ProcResult:
        sb, m_app = t.sb, Mount(t.verifier_app, "/app", writable=True)
        m_tests = Mount(t.tests, "/tests")
        verifier_dir = t.logs / "verifier"
        m_verifier = Mount(verifier_dir, "/logs/verifier", writable=True)
        m_agent_logs = Mount(t.verifier_agent_logs, "/logs/agent")
        env = {
            **t.task.verifier_env,
            **t.common_env(m_app),
            "RSI_TESTS": sb.view(m_tests),
            "RSI_CANDIDATE": sb.view(t.candidate),
        }
        cap = t.limits.app_mb << 20
        return sb.run(
            ["bash", sb.view(m_tests) + "/test.sh"],
            # the candidate (read-only) too, so a verifier can measure it instead of
            # trusting what the agent reports about itself (sat3 reads its knobs)
            mounts=[m_app, m_tests, m_verifier, m_agent_logs, t.candidate],
            cwd=m_app,
            env=env,
            timeout=self._verifier_timeout(t.task),
            network=t.task.verifier_network,
            output_limit=self.config.output_limit_bytes,
            limits=t.sandbox_limits(((t.verifier_app, cap), (verifier_dir, cap))),
        )

    def _verdict(
        self, t: _Trial, agent: ProcResult, verifier: ProcResult, touched: bool
    ) -> tuple[float, str | None]:
        """The reward the verifier wrote, and why it is zero or the agent failed."""
        reward, error = parse_reward(t.logs / "verifier")
        if agent.timed_out:
            timeout = self._agent_timeout(t.task)
            return reward, f"agent timed out after {timeout:g}s" + (f"; {error}" if error else "")
        if verifier.timed_out:
            return 0.0, f"verifier timed out after {self._verifier_timeout(t.task):g}s"
        if verifier.limit:
            return 0.0, f"verifier exceeded a limit: {verifier.limit}"
        if agent.exit_code and error is None:  # kept as the reason; the reward stands
            last = agent.stderr[-TAIL:].decode(errors="replace").strip().splitlines()
            error = (
                f"agent exited with status {agent.exit_code}"
                + ("" if touched else f" {appdiff.UNTOUCHED}")
                + (f": {last[-1]}" if last else "")
            )
        return reward, error

    def _agent_timeout(self, task: Task) -> float:
        return min(task.agent_timeout, self.config.agent_timeout_s or task.agent_timeout)

    def _verifier_timeout(self, task: Task) -> float:
        return min(task.verifier_timeout, self.config.verifier_timeout_s or task.verifier_timeout)

    def _agent_logs(self, folder: Path, cap: int, blobs: dict[str, bytes]) -> list[str]:
        """The agent's log files (regular files only, each cut at the output limit) into
        ``blobs`` until ``cap`` bytes are stored; the files left out, with why."""
        dropped, stored = [], 0
        for f in sorted(folder.rglob("*")):
            rel = f.relative_to(folder).as_posix()
            if f.is_dir() and not f.is_symlink():
                continue
            try:
                data = read_regular(f, cap)[: self.config.output_limit_bytes]
            except (UnsafeFile, OSError) as exc:
                dropped.append(f"{rel}: {exc}")
                continue
            if stored + len(data) > cap:
                dropped.append(f"{rel}: past the {cap >> 20} MiB of artifacts stored per task")
                continue
            stored += len(data)
            blobs["logs/agent/" + rel] = data
        return dropped

    def _breach(
        self, task: Task, agent: ProcResult, reason: str
    ) -> tuple[TaskRun, dict[str, bytes]]:
        """The task ends at a broken limit: reward 0, the reason kept, no verifier run."""
        trajectory = {
            "task": task.id,
            "reward": 0.0,
            "error": reason,
            "agent": _phase(agent),
            "limit": reason,
        }
        blobs = {"agent.stdout": agent.stdout, "agent.stderr": agent.stderr}
        return TaskRun(task.id, 0.0, reason, trajectory, seconds=agent.duration_s), blobs


@dataclass(frozen=True)
class _Trial:
    """One task's trial folder and what its two phases share."""

    root: Path
    task: Task
    sb: Sandbox
    app: Path  # the agent's /app
    logs: Path  # /logs/agent and /logs/verifier under it
    task_info: Path  # /task: the instruction
    candidate: Mount  # /candidate, read-only
    limits: TaskLimits

    @property
    def verifier_app(self) -> Path:
        return self.root / "verifier-app"

    @property
    def verifier_agent_logs(self) -> Path:
        return self.root / "verifier-agent-logs"

    @property
    def tests(self) -> Path:
        return self.root / "tests"

    def common_env(self, m_app: Mount) -> dict[str, str]:
        logs = Mount(self.logs, "/logs")
        return {
            "RSI_APP": self.sb.view(m_app),
            "RSI_LOGS": self.sb.view(logs),
            "RSI_TASK_ID": self.task.id,
        }

    def sandbox_limits(self, watch: tuple[tuple[Path, int], ...]) -> Limits:
        lim = self.limits
        return Limits(
            memory_mb=lim.memory_mb,
            pids=lim.pids,
            tmp_mb=lim.tmp_mb,
            file_mb=lim.app_mb,
            watch=watch,
        )


def _take(it: Iterator[Task], n: int) -> list[Task]:
    return list(itertools.islice(it, n))


def _phase(res: ProcResult) -> dict[str, Any]:
    return {
        "exit_code": res.exit_code,
        "timed_out": res.timed_out,
        "seconds": round(res.duration_s, 4),
        "truncated": res.truncated,
        "stdout_tail": res.stdout[-TAIL:].decode(errors="replace"),
        "stderr_tail": res.stderr[-TAIL:].decode(errors="replace"),
        # a limit no cgroup could hold is said, never dropped silently
        **({"limits_fallback": res.fallbacks} if res.fallbacks else {}),
    }
