"""The Ray executor, driver side: each evaluation is a Ray task on a cluster's worker.

The driver packs the candidate's verified export (and the task folders) as bytes and
submits one Ray task per evaluation with ``resources.evaluation``. When the evaluator
builds a D/T/H model, the build is a Ray task of its own first, with ``resources.build``
(GPUs included): it builds (or reuses its node's build cache), streams back the build
record with its artifacts, and leaves the model's files in Ray's object store; the
evaluation task receives them (from that node, not through the driver), checks them
against the record's ``model_digest``, serves the model and runs the harness. So one node
can train while another serves. The worker (:mod:`rsiframe.executors.ray_worker`) verifies what
arrived, runs the same local evaluator and streams back each step as it happens (the build
record, each task's outcome with its evidence, then the end); the driver writes the
artifacts, appends the events and signs. The key never leaves the driver.

Failures: Ray never retries an evaluation by itself (``max_retries=0``). A worker or node
lost mid-evaluation (or mid-build) raises :class:`WorkerLost`, which the engine records as
a failed attempt with the reason (retried under the usual rules). While it waits the driver
probes the cluster's head; when the head stops answering,
:class:`~rsiframe.errors.ClusterLost` ends the run ``failed`` (resumable) instead of hanging.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rsiframe.dth.build import BuildRejected
from rsiframe.errors import ClusterError, ClusterLost
from rsiframe.evaluators.base import EvaluationOutput, Evaluator, Put, TaskRun
from rsiframe.evaluators.local import LocalEngine
from rsiframe.executors.ray_worker import (
    Job,
    JobResult,
    Message,
    ModelPack,
    TaskPack,
    pack_folder,
    pack_tree,
    stream,
    stream_build,
)
from rsiframe.recipe.executor import ExecutorSpec
from rsiframe.tasks.taskset import TaskSet

#: how often the driver looks at the cluster while an evaluation runs, and how many
#: missed probes in a row mean the cluster is gone
POLL_S = 1.0
PROBE_EVERY_S = 2.0
PROBE_MISSES = 3
#: how long a cancelled evaluation may take to kill its sandboxes (Ctrl-C)
CANCEL_GRACE_S = 10.0
#: object store of a private Ray instance started by the driver (address null)
OBJECT_STORE_BYTES = 96 << 20


class WorkerLost(Exception):
    """The Ray worker (or its node) died mid-evaluation: a failed attempt, with the reason."""


class EvaluatorRefused(Exception):
    """The worker's evaluator differs from the run's locked one: a failed attempt."""


def import_ray(key: str = "evaluator.executor") -> Any:
    try:
        import ray
    except ImportError as exc:
        where = key if key.startswith("--") else key + ".kind"
        raise ClusterError(
            f"{where}: ray is not installed; pip install 'rsiframe[cluster]' (the cluster extra)"
        ) from exc
    return ray


def address_key(key: str) -> str:
    """The key an address error names: ``--ray-address`` or ``evaluator.executor.address``."""
    return key if key.startswith("--") else key + ".address"


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    return host.strip("[]"), int(port)


def _resolve(address: str, key: str) -> str:
    """``auto`` as Ray resolves it: the cluster `ray start` left on this host."""
    if address != "auto":
        return address
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die

        return str(canonicalize_bootstrap_address_or_die("auto"))
    except Exception as exc:
        raise ClusterError(f"{key}: auto: no running Ray cluster found on this host") from exc


def probe(spec: ExecutorSpec, key: str = "evaluator.executor") -> None:
    """Preflight: the extra is installed and the cluster's address answers (no connection)."""
    import_ray(key)
    if spec.address is None:
        return  # a private instance is started with the run
    address = _resolve(spec.address, address_key(key))
    try:
        socket.create_connection(_host_port(address), timeout=5).close()
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        where = address_key(key)
        raise ClusterError(f"{where}: no Ray cluster answers at {address} ({why})") from exc


def _run_job(job: Job, tasks: TaskPack, model: ModelPack | None = None) -> Iterator[Message]:
    """The evaluation's Ray task (a streaming generator), in a worker process of the cluster;
    Ray hands it ``model`` (a build task's output) from the object store."""
    import ray

    yield from stream(job, tasks, ray.get_runtime_context().get_node_id(), model)


def _build_job(job: Job, tasks: TaskPack) -> Iterator[Message | ModelPack]:
    """The D/T/H build's Ray task (a streaming generator): its last item is the model."""
    import ray

    yield from stream_build(job, tasks, ray.get_runtime_context().get_node_id())


class RayExecutor:
    """Evaluations as Ray tasks; results come back to this (the driver) process."""

    kind = "ray"

    def __init__(self, spec: ExecutorSpec, key: str = "evaluator.executor") -> None:
        ray = import_ray(key)
        self.spec = spec
        self._lock = threading.Lock()
        self._running: set[Any] = set()  # streaming refs of the evaluations in flight
        self._owns = not ray.is_initialized()
        if self._owns:
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": logging.WARNING,
            }
            try:
                if spec.address is None:  # a private instance: this host, loopback only
                    ray.init(
                        num_cpus=os.cpu_count(),
                        object_store_memory=OBJECT_STORE_BYTES,
                        _node_ip_address="127.0.0.1",
                        **options,
                    )
                else:
                    ray.init(address=spec.address, **options)
            except Exception as exc:
                raise ClusterError(
                    f"{address_key(key)}: cannot connect to Ray at {spec.address}: {exc}"
                ) from exc
        gcs = getattr(ray.get_runtime_context(), "gcs_address", None)
        self._gcs = _host_port(gcs) if isinstance(gcs, str) and ":" in gcs else None
        self._remote = ray.remote(_run_job)
        self._remote_build = ray.remote(_build_job)
        self._packs: dict[tuple[str, ...], Any] = {}  # task ids -> ObjectRef of their pack
        self._lost: str | None = None
        self._misses = 0
        self._probed = 0.0

    # -- health ----------------------------------------------------------------------

    def _alive(self, force: bool = False) -> None:
        """Raise :class:`ClusterLost` once the cluster's head stops answering."""
        if self._lost is not None:
            raise ClusterLost(self._lost)
        if self._gcs is None or (not force and time.monotonic() - self._probed < PROBE_EVERY_S):
            return
        self._probed = time.monotonic()
        try:
            socket.create_connection(self._gcs, timeout=2).close()
            self._misses = 0
        except OSError as exc:
            self._misses += 1
            if force or self._misses >= PROBE_MISSES:
                host, port = self._gcs
                self._lost = f"the Ray cluster at {host}:{port} stopped answering ({exc})"
                raise ClusterLost(self._lost) from exc

    # -- evaluation --------------------------------------------------------------------

    def _tasks(self, taskset: TaskSet, ids: set[str]) -> Any:
        key = tuple(sorted(ids))
        if key not in self._packs:
            ray = import_ray()
            pack = TaskPack({}, {})
            for tid in key:
                pack.files[tid], pack.rows[tid] = pack_folder(taskset.tasks[tid].path)
            self._packs[key] = ray.put(pack)
        return self._packs[key]

    def run(
        self,
        evaluator: Evaluator,
        taskset: TaskSet,
        candidate_dir: Path,
        task_ids: list[str],
        put: Put,
        on_done: Callable[[TaskRun], None] | None = None,
        *,
        on_built: Callable[[dict[str, Any]], None] | None = None,
        on_usage: Callable[[dict[str, int]], None] | None = None,
        token_limit: int | None = None,
    ) -> EvaluationOutput:
        self._alive(force=True)
        assert isinstance(evaluator, LocalEngine)  # the only engine a Ray executor runs (check)
        builds = evaluator.builder is not None
        protected = evaluator.protected if builds else {}
        job = Job(
            engine=evaluator.name,
            config=evaluator.config.model_dump(mode="json"),
            fingerprint=evaluator.fingerprint(),
            candidate=pack_tree(candidate_dir),
            task_ids=list(task_ids),
            protected=protected,
            token_limit=token_limit,
        )
        needed = set(task_ids) | {t for ids in protected.values() for t in ids}
        tasks = self._tasks(taskset, needed)
        model: Any = None
        build: dict[str, str] = {}
        if builds:  # a task of its own first, on a node with resources.build
            job.model, model, build = self._build(job, tasks, put, on_built)
            job.protected = {}  # the build audited the training data; serving needs none
        res = self.spec.resources.evaluation
        gen = self._submit(self._remote, res, job, tasks, model)
        out = self._collect(gen, task_ids, put, None, on_usage, on_done)
        if build:
            out.executor = {**(out.executor or {}), "build": build}
        return out

    def _submit(self, remote: Any, res: Any, *args: Any) -> Any:
        """A streaming Ray task with these resources, never retried by Ray itself."""
        gen = remote.options(
            num_returns="streaming",
            num_cpus=res.num_cpus,
            num_gpus=res.num_gpus,
            max_retries=0,
            retry_exceptions=False,
        ).remote(*args)
        with self._lock:  # until its messages are taken (Ctrl-C cancels it)
            self._running.add(gen)
        return gen

    def _build(
        self,
        job: Job,
        tasks: Any,
        put: Put,
        on_built: Callable[[dict[str, Any]], None] | None,
    ) -> tuple[dict[str, Any], Any, dict[str, str]]:
        """The D/T/H build as its own Ray task: the build record, the model's object (left
        in the cluster's object store for the evaluation task) and the build's node."""
        gen = self._submit(self._remote_build, self.spec.resources.build, job, tasks)
        record: dict[str, Any] | None = None
        model: list[Any] = []

        def built(r: dict[str, Any]) -> None:
            nonlocal record
            record = r
            if on_built is not None:
                on_built(r)

        out = self._collect(gen, [], put, built, None, None, model)
        if record is None or not model:
            raise WorkerLost("the Ray build task ended without a model")
        node = {k: v for k, v in (out.executor or {}).items() if k != "kind"}
        return record, model[0], node

    def cancel_all(self) -> None:
        """Cancel every evaluation in flight (Ctrl-C after its grace period): each worker
        kills its sandboxes; one that does not stop in time dies with its worker process."""
        ray = import_ray()
        with self._lock:
            gens = list(self._running)
        for gen in gens:
            ray.cancel(gen)
        for gen in gens:
            if not ray.wait([gen], timeout=CANCEL_GRACE_S)[0]:
                ray.cancel(gen, force=True)

    def _collect(
        self,
        gen: Any,
        task_ids: list[str],
        put: Put,
        on_built: Callable[[dict[str, Any]], None] | None,
        on_usage: Callable[[dict[str, int]], None] | None,
        on_done: Callable[[TaskRun], None] | None,
        model: list[Any] | None = None,
    ) -> EvaluationOutput:
        out = EvaluationOutput()
        end: JobResult | None = None
        for msg in self._messages(gen, model):  # as each step happens on the worker
            _store(msg, put)
            if msg.built is not None and on_built is not None:
                on_built(msg.built)
            if msg.run is not None:
                out.runs[msg.run.task_id] = msg.run
                out.task_seconds += msg.run.seconds
                if on_done is not None:
                    on_done(msg.run)
            end = msg.end or end
        end = _ended(end, on_usage)
        missing = [t for t in task_ids if t not in out.runs]
        if missing:
            raise WorkerLost(f"the Ray worker returned no outcome for {', '.join(missing)}")
        out.model, out.usage = end.model, end.usage
        out.executor = {"kind": self.kind, **end.node}
        return out

    def _messages(self, gen: Any, model: list[Any] | None = None) -> Iterator[Message]:
        """The evaluation's messages as they arrive; failures mapped to what the engine knows.
        A build's last item (the model) is not fetched: its reference goes into ``model``."""
        ray = import_ray()
        try:
            while (ref := self._next(ray, gen)) is not None:
                msg = ray.get(ref)
                if not isinstance(msg, Message):
                    raise WorkerLost(f"the Ray worker sent {type(msg).__name__}")
                yield msg
                if model is not None and msg.end is not None and msg.end.model_follows:
                    if (ref := self._next(ray, gen)) is not None:
                        model.append(ref)
                    return
        except KeyboardInterrupt:
            # the worker's evaluation gets a KeyboardInterrupt and kills its sandboxes; one
            # that does not stop within the grace period is killed with its worker process
            ray.cancel(gen)
            if not ray.wait([gen], timeout=CANCEL_GRACE_S)[0]:
                ray.cancel(gen, force=True)
            raise
        except ray.exceptions.RayTaskError as exc:  # the evaluation raised on the worker
            cause = getattr(exc, "cause", None)
            raise (cause if isinstance(cause, Exception) else WorkerLost(str(exc))) from None
        except ray.exceptions.RayError as exc:  # worker, node or object lost
            self._alive(force=True)  # a dead head is a lost cluster, not a lost worker
            first = (str(exc).strip().splitlines() or [""])[0]
            why = f"{type(exc).__name__}: {first}"
            raise WorkerLost(f"the Ray worker was lost mid-evaluation: {why}") from exc
        finally:  # done with it: Ctrl-C no longer needs to cancel it
            with self._lock:
                self._running.discard(gen)

    def _next(self, ray: Any, gen: Any) -> Any:
        """The stream's next reference once it is ready (None at its end); the cluster is
        probed while it waits."""
        while not ray.wait([gen], timeout=POLL_S)[0]:
            self._alive()
        return next(gen, None)

    def close(self) -> None:
        """Disconnect (a private instance stops); never hangs on a cluster that is gone."""
        if not self._owns:
            return
        ray = import_ray()
        done = threading.Thread(target=ray.shutdown, daemon=True)
        done.start()
        done.join(timeout=15)


def _store(msg: Message, put: Put) -> None:
    """The artifacts a worker streamed, written here: the driver alone writes the archive."""
    for digest, data in msg.blobs.items():
        if put(data) != digest:
            raise WorkerLost(f"an artifact from the Ray worker is corrupt ({digest})")


def _ended(end: JobResult | None, on_usage: Callable[[dict[str, int]], None] | None) -> JobResult:
    """The evaluation's last message, its refusal or rejection raised; its tokens charged
    (a rejected build's too, before it is raised)."""
    if end is None:
        raise WorkerLost("the Ray worker ended the evaluation without a result")
    if end.refused is not None:
        raise EvaluatorRefused(end.refused)
    if end.usage is not None and on_usage is not None:
        on_usage(end.usage)
    if end.rejected is not None:
        raise BuildRejected(*end.rejected)
    return end
