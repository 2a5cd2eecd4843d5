"""The ``local`` evaluator engine: run a candidate on Harbor-format tasks in a sandbox.

Each task gets a fresh trial folder. The agent phase sees the candidate export
read-only at ``/candidate``, the task's ``environment/`` files at ``/app``, the
instruction at ``/task/instruction.md`` and a writable ``/logs/agent``; it
never sees the tests. When the agent and every process it started are gone, the
verifier phase runs ``bash /tests/test.sh`` with the tests mounted read-only, the
candidate read-only at ``/candidate`` (so a verifier can measure the candidate itself
rather than trust what its agent reports), a freshly created ``/logs/verifier`` and its
own copy of ``/app`` (:mod:`rsiframe.appcopy`: links that leave ``/app`` and special
files dropped and named in the trajectory, hard links broken), so nothing the agent
wrote or linked can become its reward. Paths are also given as environment
variables (``RSI_APP``, ``RSI_CANDIDATE``, ``RSI_LOGS``, ``RSI_TESTS``) so the
process fallback, which cannot remap paths, works for tasks that use them.

With a ``build`` config (the D/T/H target) the evaluator first builds the
candidate's model (:mod:`rsiframe.build`: data step, contamination audit, train
step; cached by input digests), opens an endpoint for it on the long-lived model
server (:mod:`rsiframe.serving`), and runs the agent behind an in-sandbox forwarder
that exposes that endpoint, and nothing else, at ``$OPENAI_BASE_URL`` with the
model name in ``$RSI_MODEL``. The server meters the tokens of each evaluation.
With ``model`` (a model the recipe declares) the agent reaches that model the same way,
through the run's model gateway (:mod:`rsiframe.gateway`): each evaluation gets its own
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rsiframe import (
    __version__,
    appcopy,
    appdiff,
    docker_sandbox,
    faults,
    harbor_engine,
    serving,
    taskimage,
)
from rsiframe.build import BuildConfig, Builder, BuildRejected, Built
from rsiframe.contamination import AuditResult, Item, audit, protected_items
from rsiframe.cpuslots import cpu_slot
from rsiframe.digest import sha256_bytes, sha256_json
from rsiframe.errors import LockMismatch
from rsiframe.reaper import discard
from rsiframe.safefile import UnsafeFile, read_regular
from rsiframe.sandbox import Limits, Mount, ProcResult, Sandbox, kill_all, make_sandbox
from rsiframe.serving import ModelRefused, ModelServer
from rsiframe.tasks import Task, TaskSet

TAIL = 4000
_SKIP_ENV_FILES = {"Dockerfile", "docker-compose.yaml", "docker-compose.yml"}


class TaskLimits(BaseModel):
    """Resource limits of each task's agent and verifier (``evaluator.config.limits``; a
    task's ``[rsiframe]`` table in task.toml overrides them key by key). A task that
    breaks one ends with reward 0 and the limit named as its error."""

    model_config = ConfigDict(extra="forbid")

    memory_mb: int = Field(
        4096,
        gt=0,
        description="memory of all its processes (MiB; memory cgroup, else RLIMIT_AS per process)",
    )
    pids: int = Field(512, gt=0, description="processes at once (pids cgroup, else RLIMIT_NPROC)")
    tmp_mb: int = Field(512, gt=0, description="size of the private /tmp (bubblewrap)")
    app_mb: int = Field(1024, gt=0, description="what /app and /logs/agent may hold")
    artifacts_mb: int = Field(16, gt=0, description="agent log files stored per task")

    def of(self, task: Task) -> TaskLimits:
        return TaskLimits.model_validate({**self.model_dump(), **task.limits})


class LocalEngineConfig(BaseModel):
    """Config of the ``local`` engine (``evaluator.config`` in a recipe)."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(description="shell command that runs the candidate's agent (cwd /app)")
    sandbox: Literal["auto", "bwrap", "process", "docker"] = Field(
        "auto",
        description="bwrap, the plain process fallback, auto (bwrap when it works), or docker",
    )
    concurrency: int = Field(2, ge=1, le=256, description="tasks run at the same time")
    agent_timeout_s: float | None = Field(
        None, gt=0, description="cap on each task's [agent] timeout_sec"
    )
    verifier_timeout_s: float | None = Field(
        None, gt=0, description="cap on each task's [verifier] timeout_sec"
    )
    output_limit_bytes: int = Field(1 << 20, ge=1024, description="stdout/stderr kept per phase")
    limits: TaskLimits = Field(
        default_factory=lambda: TaskLimits(),
        description="per-task limits of agent and verifier (a task's [rsiframe] table wins)",
    )
    build: BuildConfig | None = Field(
        None, description="build a model from data/ and trainer/ first, and serve it (D/T/H)"
    )
    model: str | None = Field(
        None,
        description="a declared model (recipe models:) the candidate's agent reaches through "
        "the run's gateway at $OPENAI_BASE_URL (its name in $RSI_MODEL)",
    )

    @model_validator(mode="after")
    def _one_model_source(self) -> LocalEngineConfig:
        if self.build is not None and self.model is not None:
            raise ValueError("model: a D/T/H build serves the candidate's own model; give one")
        return self


@dataclass
class TaskRun:
    """One task's outcome: the reward, why it is zero if it failed, and its trajectory."""

    task_id: str
    reward: float
    error: str | None
    trajectory: dict[str, Any]
    trajectory_digest: str = ""
    seconds: float = 0.0


@dataclass
class EvaluationOutput:
    runs: dict[str, TaskRun] = field(default_factory=dict)
    task_seconds: float = 0.0
    model: dict[str, Any] | None = None  # the built model's identity, build and token usage
    usage: dict[str, int] | None = None  # model tokens this evaluation used
    executor: dict[str, Any] | None = None  # where it ran (rsiframe.executor)
    #: with ``evaluator.config.model``: what the agent called through the gateway, per
    #: model (calls, tokens charged, cached, refused); the certificate records it
    models_called: dict[str, dict[str, int]] | None = None


Put = Callable[[bytes], str]


def _code_digest() -> str:
    from rsiframe import build, cgroups, contamination, sandbox, serving

    modules = (sandbox, cgroups, build, contamination, serving, taskimage)
    sources = [Path(__file__).read_bytes(), *(Path(m.__file__).read_bytes() for m in modules)]
    return sha256_bytes(b"\0".join(sources))


def parse_reward(verifier_dir: Path) -> tuple[float, str | None]:
    """Harbor's reward files: a number in reward.txt, or numeric keys in reward.json."""
    txt = verifier_dir / "reward.txt"
    js = verifier_dir / "reward.json"
    try:  # regular files only, never a link or a FIFO, at most 1 MiB
        if txt.exists() or txt.is_symlink():
            return float(read_regular(txt, 1 << 20).decode().strip()), None
        if js.exists() or js.is_symlink():
            data = json.loads(read_regular(js, 1 << 20))
            if isinstance(data, int | float):
                return float(data), None
            if isinstance(data, dict):
                if isinstance(data.get("reward"), int | float):
                    return float(data["reward"]), None
                nums = [float(v) for v in data.values() if isinstance(v, int | float)]
                if nums:
                    return sum(nums) / len(nums), None
            return 0.0, "reward.json holds no numeric reward"
    except (ValueError, OSError) as exc:
        return 0.0, f"unreadable reward: {exc}"
    return 0.0, "verifier wrote no reward"


class LocalEngine:
    """Runs tasks on this host, each in its own sandboxed trial folder."""

    name = "local"

    def __init__(
        self, config: LocalEngineConfig, work_root: Path, cache_root: Path | None = None
    ) -> None:
        """``cache_root`` replaces the shared build cache (``verify --reproduce --rebuild``
        passes an empty one, so everything is built again)."""
        self.config = config
        self.work_root = work_root
        self.sandbox: Sandbox = make_sandbox(config.sandbox)
        #: docker: a task whose environment/Dockerfile adds packages runs in its own image
        self.images = taskimage.TaskImages(self.sandbox)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        #: evaluations that may run at once (candidates in flight); each runs at most
        #: ``config.concurrency`` tasks at a time, so the two compose
        self.parallel = 1
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
                    run, blobs = fut.result()
                    # artifacts are written by the coordinating thread only
                    refs = {name: put(data) for name, data in blobs.items()}
                    run.trajectory["artifacts"] = refs
                    run.trajectory_digest = put(json.dumps(run.trajectory, sort_keys=True).encode())
                    out.runs[run.task_id] = run
                    out.task_seconds += run.seconds
                    if on_done:
                        on_done(run)
        except BaseException as exc:
            for fut in futures:
                fut.cancel()
            if self.parallel == 1 or isinstance(exc, KeyboardInterrupt):
                kill_all()  # with candidates in flight, the others' trials are not ours to kill
            wait(futures)
            raise
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self.server is not None:
            self.server.stop()

    def _trial(
        self, candidate_dir: Path, task: Task, ep: HarnessEndpoint | None = None
    ) -> tuple[TaskRun, dict[str, bytes]]:
        faults.reached("stage:task")
        trial = self.work_root / f"trial-{task.id}-{uuid.uuid4().hex[:8]}"
        try:
            return self._trial_in(trial, candidate_dir, task, ep)
        finally:
            discard(trial)  # deleted in the background (perf)

    def _trial_in(
        self, trial: Path, candidate_dir: Path, task: Task, ep: HarnessEndpoint | None = None
    ) -> tuple[TaskRun, dict[str, bytes]]:
        app = trial / "app"
        env_src = task.path / "environment"
        if env_src.is_dir():
            shutil.copytree(
                env_src,
                app,
                symlinks=True,
                ignore=lambda d, names: [n for n in names if n in _SKIP_ENV_FILES],
            )
        else:
            app.mkdir(parents=True)
        logs = trial / "logs"
        (logs / "agent").mkdir(parents=True)
        task_info = trial / "task"
        task_info.mkdir()
        (task_info / "instruction.md").write_text(task.instruction)

        sb = self.images.for_task(task.id, task.path)
        m_app = Mount(app, "/app", writable=True)
        m_cand = Mount(candidate_dir, "/candidate")
        m_task = Mount(task_info, "/task")
        m_agent_logs = Mount(logs / "agent", "/logs/agent", writable=True)
        m_logs = Mount(logs, "/logs")
        common = {"RSI_APP": sb.view(m_app), "RSI_LOGS": sb.view(m_logs), "RSI_TASK_ID": task.id}

        lim = self.config.limits.of(task)
        app_cap = lim.app_mb << 20
        agent_timeout = min(task.agent_timeout, self.config.agent_timeout_s or task.agent_timeout)
        argv = ["sh", "-c", self.config.agent]
        mounts = [m_cand, m_app, m_task, m_agent_logs]
        model_env: dict[str, str] = {}
        if ep is not None:  # the endpoint's folder only, behind the in-sandbox forwarder
            argv, extra, model_env = ep.harness(sb, argv)
            mounts += extra
        app_before = appdiff.scan(app)
        agent = sb.run(
            argv,
            mounts=mounts,
            cwd=m_app,
            env={
                **task.agent_env,
                **common,
                **model_env,
                "RSI_CANDIDATE": sb.view(m_cand),
                "RSI_INSTRUCTION": sb.view(m_task) + "/instruction.md",
            },
            timeout=agent_timeout,
            network=task.agent_network,
            output_limit=self.config.output_limit_bytes,
            limits=Limits(
                memory_mb=lim.memory_mb,
                pids=lim.pids,
                tmp_mb=lim.tmp_mb,
                file_mb=lim.app_mb,
                watch=((app, app_cap), (logs / "agent", app_cap)),
            ),
        )
        if agent.limit:
            return self._breach(task, agent, f"agent exceeded a limit: {agent.limit}")

        app_out = appdiff.changes_since(app, app_before)  # evidence, before the verifier runs
        # the verifier gets its own copy of /app, made after every agent process is gone:
        # links out of /app (to the tests, the verifier's logs, the host) and special files
        # are dropped and named in the evidence, hard links are broken by copying
        v_app = trial / "verifier-app"
        try:
            removed = appcopy.freeze(app, v_app, max_bytes=app_cap)
        except appcopy.AppTooLarge as exc:
            return self._breach(task, agent, f"agent exceeded a limit: {exc}")
        m_app = Mount(v_app, "/app", writable=True)
        common["RSI_APP"] = sb.view(m_app)
        # a fresh verifier folder: whatever the agent left under /logs/verifier is discarded
        verifier_dir = logs / "verifier"
        shutil.rmtree(verifier_dir, ignore_errors=True)
        verifier_dir.mkdir()
        tests = trial / "tests"
        shutil.copytree(task.path / "tests", tests, symlinks=True)
        m_tests = Mount(tests, "/tests")
        m_verifier = Mount(verifier_dir, "/logs/verifier", writable=True)
        verifier_timeout = min(
            task.verifier_timeout, self.config.verifier_timeout_s or task.verifier_timeout
        )
        verifier = sb.run(
            ["bash", sb.view(m_tests) + "/test.sh"],
            # the candidate (read-only) too, so a verifier can measure it instead of
            # trusting what the agent reports about itself (sat3 reads its knobs)
            mounts=[m_app, m_tests, m_verifier, Mount(logs / "agent", "/logs/agent"), m_cand],
            cwd=m_app,
            env={
                **task.verifier_env,
                **common,
                "RSI_TESTS": sb.view(m_tests),
                "RSI_CANDIDATE": sb.view(m_cand),
            },
            timeout=verifier_timeout,
            network=task.verifier_network,
            output_limit=self.config.output_limit_bytes,
            limits=Limits(
                memory_mb=lim.memory_mb,
                pids=lim.pids,
                tmp_mb=lim.tmp_mb,
                file_mb=lim.app_mb,
                watch=((v_app, app_cap), (verifier_dir, app_cap)),
            ),
        )
        reward, error = parse_reward(verifier_dir)
        if agent.timed_out:
            error = f"agent timed out after {agent_timeout:g}s" + (f"; {error}" if error else "")
        elif verifier.timed_out:
            reward, error = 0.0, f"verifier timed out after {verifier_timeout:g}s"
        elif verifier.limit:
            reward, error = 0.0, f"verifier exceeded a limit: {verifier.limit}"
        elif agent.exit_code and error is None:  # kept as the reason; the reward stands
            last = agent.stderr[-TAIL:].decode(errors="replace").strip().splitlines()
            error = (
                f"agent exited with status {agent.exit_code}"
                + ("" if app_out.touched else f" {appdiff.UNTOUCHED}")
                + (f": {last[-1]}" if last else "")
            )
        blobs = {
            "agent.stdout": agent.stdout,
            "agent.stderr": agent.stderr,
            "verifier.stdout": verifier.stdout,
            "verifier.stderr": verifier.stderr,
        }
        dropped = self._agent_logs(logs / "agent", lim.artifacts_mb << 20, blobs)
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
            trajectory["image"] = {"isolation": sb.isolation, **self.images.built[task.id].record()}
        if removed:
            trajectory["app_removed"] = [r.as_dict() for r in removed]
        if dropped:
            trajectory["artifacts_dropped"] = dropped
        seconds = agent.duration_s + verifier.duration_s
        return TaskRun(task.id, reward, error, trajectory, seconds=seconds), blobs

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


class HarnessEndpoint(Protocol):
    """A model endpoint a harness reaches from its sandbox (``serving.OpenEndpoint``, or
    the gateway's ``SandboxEndpoint``): the wrapped command, its mounts, its environment."""

    def harness(self, sb: Any, argv: list[str]) -> tuple[list[str], list[Any], dict[str, str]]: ...


#: opens one evaluation's endpoint on the run's gateway (``TaskRunner.model_hooks``)
ModelEndpoints = Callable[[], HarnessEndpoint]


def gateway_endpoint(
    model: str | None, model_endpoint: ModelEndpoints | None
) -> HarnessEndpoint | None:
    """This evaluation's endpoint to ``evaluator.config.model`` (None: the agent has none)."""
    if model is None:
        return None
    if model_endpoint is None:
        raise RuntimeError(
            f"evaluator.config.model {model!r} needs the run's model gateway (a models: section)"
        )
    return model_endpoint()


def _take(it: Iterator[Task], n: int) -> list[Task]:
    return list(itertools.islice(it, n))


def serving_file() -> str:
    return str(serving.SCRIPT)


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


ENGINES: dict[str, tuple[type[BaseModel], Callable[..., Any]]] = {
    "local": (LocalEngineConfig, LocalEngine),
    "harbor": (harbor_engine.HarborEngineConfig, harbor_engine.HarborEngine),
}
#: checks an engine makes before a run folder exists (bad input: one line, exit 2)
PREFLIGHT: dict[str, Callable[[Any, TaskSet, list[str]], None]] = {
    "local": lambda config, taskset, ids: (
        taskimage.preflight({t: taskset.tasks[t].path for t in ids})
        if config.sandbox == "docker"
        else None
    ),
    "harbor": harbor_engine.preflight,
}


def preflight_engine(engine: str, config: BaseModel, taskset: TaskSet, task_ids: list[str]) -> None:
    """The engine's own preflight (Harbor: its environment starts, it accepts the tasks)."""
    check = PREFLIGHT.get(engine)
    if check is not None:
        check(config, taskset, task_ids)


def make_evaluator(
    engine: str, config: dict[str, Any], work: Path, cache_root: Path | None = None
) -> LocalEngine:
    """An evaluator from a frozen recipe's ``evaluator`` section (``verify --reproduce``);
    ``cache_root``: a build cache of its own instead of the shared one."""
    entry = ENGINES.get(engine)
    if entry is None:
        raise LockMismatch(f"the run's evaluator engine {engine!r} is not installed here")
    config_cls, factory = entry
    try:
        parsed = config_cls.model_validate(config)
    except ValidationError as exc:
        raise LockMismatch(
            f"the run's evaluator config is not valid here: {exc.errors()[0]['msg']}"
        ) from exc
    # only the local engine builds models (--rebuild on another engine changes nothing)
    if cache_root is None or factory is not LocalEngine:
        return factory(parsed, work)  # type: ignore[no-any-return]
    return factory(parsed, work, cache_root)  # type: ignore[no-any-return]


def run_tasks(
    evaluator: LocalEngine,
    taskset: TaskSet,
    candidate_dir: Path,
    task_ids: list[str],
    put: Put,
    on_done: Callable[[TaskRun], None] | None = None,
    **hooks: Any,
) -> EvaluationOutput:
    """Run ``task_ids`` on an exported candidate: the one way the framework runs tasks.

    ``hooks`` (``on_built``, ``on_usage``, ``token_limit``) reach a D/T/H evaluator's build
    and model server."""
    tasks = [taskset.tasks[t] for t in task_ids]
    return evaluator.run(candidate_dir, tasks, put, on_done, **hooks)


def evaluator_parts(engine: LocalEngine) -> dict[str, Any]:
    """What evaluator.lock.json holds: the fingerprint and the parts it is made of."""
    return {"fingerprint": engine.fingerprint(), **engine.lock_parts()}


def evaluator_changes(now: dict[str, Any], locked: dict[str, Any]) -> list[str]:
    """The parts of ``now`` (:func:`evaluator_parts`) that differ from ``locked``; else ``code``."""
    changed = [k for k, v in now.items() if k != "fingerprint" and v != locked.get(k)]
    return changed or ["code"]
