"""The worker side of the Ray executor: unpack, verify again, evaluate with the local engine.

Runs in a Ray worker process; nothing here imports Ray. Everything a worker uses comes
from the driver in one :class:`Job`: the candidate's verified export as bytes (checked
here against its git tree hash), the task folders (checked against the file rows the
driver packed), the evaluator's frozen config and the fingerprint the run locked. A
worker whose evaluator differs (other code, weaker isolation) refuses to evaluate. The
evaluation itself is the same :class:`~rsiframe.evaluators.local.LocalEngine` the driver would
run: the same sandbox, and for D/T/H the same build cache (``$RSIFRAME_CACHE_DIR`` on
the worker's node) and model server. The worker never sees the signing key: it returns
rewards, trajectories, logs and the model identity, and the driver alone signs.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import platform
import queue
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from rsiframe.dth.build import BuildRejected, Built, files_of
from rsiframe.evaluators.base import TaskRun
from rsiframe.evaluators.local import LocalEngine
from rsiframe.evaluators.registry import make_evaluator
from rsiframe.repo.gittree import (
    MODE_EXEC,
    MODE_FILE,
    MODE_LINK,
    Entry,
    blob_sha,
    snapshot,
    tree_hash,
)
from rsiframe.sandbox.bwrap import kill_all
from rsiframe.tasks.taskset import TaskSet, file_rows
from rsiframe.util.digest import sha256_json

#: one file of a packed folder: (relative path, kind, bytes); kind is ``f`` (file),
#: ``x`` (executable) or ``l`` (symlink; the bytes are its target), as in ``file_rows``
Packed = tuple[str, str, bytes]
#: how long a cancelled evaluation's sandboxes are killed as they start
CANCEL_S = 8.0
_MODES = {MODE_FILE: "f", MODE_EXEC: "x", MODE_LINK: "l"}


class PackMismatch(Exception):
    """What arrived on the worker is not what the driver verified and sent."""


@dataclass
class TreePack:
    """A candidate's verified export, as bytes, with the git tree hash it must have."""

    files: list[Packed]
    tree: str

    @property
    def size(self) -> int:
        return sum(len(d) for _, _, d in self.files)


@dataclass
class TaskPack:
    """The task folders an evaluation needs, with each one's file rows (as in the task lock)."""

    files: dict[str, list[Packed]]
    rows: dict[str, dict[str, str]]

    @property
    def key(self) -> str:
        rows = sorted((t, sorted(r.items())) for t, r in self.rows.items())
        return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


@dataclass
class Job:
    """One evaluation for a worker; the driver keeps everything it needs to sign."""

    engine: str
    config: dict[str, Any]
    fingerprint: str  # the run's evaluator fingerprint: the worker must compute the same
    candidate: TreePack
    task_ids: list[str]
    protected: dict[str, list[str]]  # split -> task ids a build's training data must not hold
    token_limit: int | None = None
    model: dict[str, Any] | None = None  # the build record of a model shipped with the job


@dataclass
class JobResult:
    """How an evaluation ended: its model and tokens, or the candidate's own build failure."""

    node: dict[str, str]
    model: dict[str, Any] | None = None
    usage: dict[str, int] | None = None
    rejected: tuple[str, str, dict[str, Any]] | None = None  # BuildRejected(stage, reason, ...)
    refused: str | None = None  # the worker cannot evaluate as the run locked
    model_follows: bool = False  # a build job: the next item of the stream is the ModelPack
    # what :func:`evaluate` collects from the stream (the driver takes them message by message)
    runs: list[TaskRun] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)
    built: dict[str, Any] | None = None


@dataclass
class ModelPack:
    """A built model's files, shipped from the build task to the evaluation task; checked on
    arrival against the file digests of the build record (``model_digest``)."""

    files: list[Packed]
    rows: dict[str, str]  # relative path -> sha256, as the build cache's manifest has them


@dataclass
class Message:
    """One step of an evaluation, sent to the driver as it happens, with the artifacts
    (digest -> bytes) written since the previous message."""

    kind: Literal["built", "task", "end"]
    blobs: dict[str, bytes]
    built: dict[str, Any] | None = None  # the build record, before the tasks run
    run: TaskRun | None = None  # one task's outcome, as it ends
    end: JobResult | None = None


# -- packing (driver) and unpacking (worker) ----------------------------------------------


def pack_tree(root: Path) -> TreePack:
    """``root`` (a verified export) as bytes; the tree hash is computed from those bytes."""
    snap = snapshot(root, ignore=())
    if snap.problems:
        raise PackMismatch(f"{root}: {snap.problems[0][0]}: {snap.problems[0][1]}")
    files: list[Packed] = []
    entries: dict[str, Entry] = {}
    for path, entry in sorted(snap.entries.items()):
        if entry.mode not in _MODES:
            raise PackMismatch(f"{path}: mode {entry.mode} cannot be shipped")
        data = snap.content(path)
        entries[path] = Entry(entry.mode, blob_sha(data))
        files.append((path, _MODES[entry.mode], data))
    return TreePack(files, tree_hash(entries))


def pack_folder(root: Path) -> tuple[list[Packed], dict[str, str]]:
    """A task folder as bytes, and its file rows computed from those bytes."""
    files: list[Packed] = []
    rows: dict[str, str] = {}
    for rel in file_rows(root):
        full = root / rel
        if full.is_symlink():
            kind, data = "l", os.fsencode(os.readlink(full))
        else:  # executable as file_rows sees it: the owner's x bit
            kind = "x" if os.lstat(full).st_mode & stat.S_IXUSR else "f"
            data = full.read_bytes()
        files.append((rel, kind, data))
        rows[rel] = kind + ":" + hashlib.sha256(data).hexdigest()
    return files, rows


def unpack(files: list[Packed], dest: Path) -> None:
    """Write packed files under ``dest``; no path may leave it (nor pass through a link)."""
    dest.mkdir(parents=True, exist_ok=True)
    top = dest.resolve()
    for rel, kind, data in files:
        parts = PurePosixPath(rel).parts
        if not parts or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise PackMismatch(f"refusing packed path {rel!r}")
        target = top.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.parent.resolve().is_relative_to(top):
            raise PackMismatch(f"packed path {rel!r} passes through a link")
        if kind == "l":
            os.symlink(os.fsdecode(data), target)
        else:
            target.write_bytes(data)
            target.chmod(0o755 if kind == "x" else 0o644)


# -- the worker --------------------------------------------------------------------------

_SCRATCH: Path | None = None
_ENGINES: dict[tuple[str, str], LocalEngine] = {}  # one per evaluator config, per process
_TASKS: dict[str, TaskSet] = {}  # unpacked and verified task sets, by pack key


def _scratch() -> Path:
    global _SCRATCH
    if _SCRATCH is None:
        # Ray may kill worker processes before atexit runs: clear what dead workers left
        for old in Path(tempfile.gettempdir()).glob("rsiframe-worker-*-*"):
            pid = old.name.split("-")[2]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(old, ignore_errors=True)
        _SCRATCH = Path(tempfile.mkdtemp(prefix=f"rsiframe-worker-{os.getpid()}-"))
        atexit.register(_close)
    return _SCRATCH


def _close() -> None:
    for engine in _ENGINES.values():
        engine.close()
    _ENGINES.clear()
    if _SCRATCH is not None:
        shutil.rmtree(_SCRATCH, ignore_errors=True)


def _engine(job: Job) -> LocalEngine:
    key = (job.engine, sha256_json(job.config))
    engine = _ENGINES.get(key)
    if engine is None:
        work = _scratch() / f"work-{len(_ENGINES)}"
        made = make_evaluator(job.engine, job.config, work)
        assert isinstance(made, LocalEngine)  # the Ray executor runs the local engine
        engine = _ENGINES[key] = made
    return engine


def _taskset(pack: TaskPack) -> TaskSet:
    key = pack.key
    if key not in _TASKS:
        root = _scratch() / f"tasks-{key}"
        shutil.rmtree(root, ignore_errors=True)
        for tid, files in pack.files.items():
            unpack(files, root / tid)
            if file_rows(root / tid) != pack.rows[tid]:
                raise PackMismatch(f"task {tid} arrived different from what the driver sent")
        _TASKS[key] = TaskSet.load(root)
    return _TASKS[key]


def _drain(fn: Callable[[], None], messages: queue.Queue[Message]) -> Iterator[Message]:
    """Run ``fn()`` in a thread and yield what it queues until it returns.

    A cancel (Ray raises KeyboardInterrupt in this thread, which a blocking wait would only
    see later) or an abandoned stream kills the evaluation's sandboxes at once, and each
    one it starts after, until it gives up."""
    box: dict[str, BaseException] = {}
    done = threading.Event()  # not Thread.is_alive: an interrupted join() can falsify it

    def target() -> None:
        try:
            fn()
        except BaseException as exc:
            box["exc"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="evaluation", daemon=True).start()
    try:
        while True:
            try:
                yield messages.get(timeout=0.2)
            except queue.Empty:
                if done.is_set() and messages.empty():
                    break
    except BaseException:
        deadline = time.monotonic() + CANCEL_S
        while not done.is_set() and time.monotonic() < deadline:
            kill_all()
            done.wait(0.05)
        raise
    if "exc" in box:
        raise box["exc"]


def pack_model(built: Built) -> ModelPack:
    """The built model's files as bytes, with the build's digests (:func:`install_model`
    checks the bytes against them where they arrive)."""
    files = [(rel, "f", (built.model.dir / rel).read_bytes()) for rel in sorted(built.model.files)]
    return ModelPack(files, dict(built.model.files))


def install_model(engine: LocalEngine, pack: ModelPack, record: dict[str, Any]) -> Path:
    """A shipped model, unpacked under the model server's root and verified: its files must
    hash to the record's ``model_digest``, as the build cache computes it."""
    assert engine.builder is not None
    digest = str(record["model_digest"])
    if sha256_json(pack.rows) != digest:
        raise PackMismatch("the shipped model's file list does not hash to its model digest")
    root = engine.builder.models_root
    target = root / f"shipped-{digest.removeprefix('sha256:')[:32]}"
    if target.is_dir():
        if files_of(target) == pack.rows:  # shipped here before (this node), still intact
            return target
        shutil.rmtree(target, ignore_errors=True)  # edited or half written: replace it
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".shipping-", dir=root))
    try:
        unpack(pack.files, tmp)
        if files_of(tmp) != pack.rows:
            raise PackMismatch("the shipped model arrived different from what was built")
        try:
            tmp.rename(target)
        except OSError:  # another worker of this node installed it first: use theirs
            if not (target.is_dir() and files_of(target) == pack.rows):
                raise PackMismatch(f"cannot install the shipped model at {target}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def node_info(node_id: str = "") -> dict[str, str]:
    """The worker's node, as certificates record it."""
    return {
        "node": node_id or platform.node(),
        "hostname": platform.node(),
        "pid": str(os.getpid()),
    }


class _Refused(Exception):
    """This worker's evaluator differs from the run's locked one."""


@contextlib.contextmanager
def _prepared(
    job: Job, tasks: TaskPack, node: dict[str, str]
) -> Iterator[tuple[LocalEngine, TaskSet, Path]]:
    """The job's evaluator (refused when it differs from the run's), its verified task set
    and the candidate's export, unpacked and checked against its tree hash."""
    engine = _engine(job)
    if engine.fingerprint() != job.fingerprint:
        raise _Refused(
            f"the evaluator on node {node['hostname']} differs from the run's "
            f"(isolation here: {engine.isolation}; same rsiframe version and sandbox needed)"
        )
    taskset = _taskset(tasks)
    engine.protect({s: [taskset.tasks[t] for t in ids] for s, ids in job.protected.items()})
    export = Path(tempfile.mkdtemp(prefix="export-", dir=_scratch()))
    try:
        unpack(job.candidate.files, export)
        got = snapshot(export, ignore=())
        if got.problems or got.tree_sha != job.candidate.tree:
            raise PackMismatch(
                f"the export hashes to {got.tree_sha[:12]} here, expected {job.candidate.tree[:12]}"
            )
        yield engine, taskset, export
    finally:
        shutil.rmtree(export, ignore_errors=True)


class _Outbox:
    """Artifacts written since the last message, and the messages for the driver; ``put``
    and the callbacks run in the evaluation's coordinating thread."""

    def __init__(self) -> None:
        self.pending: dict[str, bytes] = {}
        self.messages: queue.Queue[Message] = queue.Queue()

    def put(self, data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.pending[digest] = data
        return digest

    def take(self) -> dict[str, bytes]:
        blobs = dict(self.pending)
        self.pending.clear()
        return blobs

    def send(self, kind: Literal["built", "task"], **what: Any) -> None:
        self.messages.put(Message(kind, self.take(), **what))


def stream(
    job: Job, tasks: TaskPack, node_id: str = "", model: ModelPack | None = None
) -> Iterator[Message]:
    """Run one evaluation here, yielding each step as it happens; the last message ends it.

    A D/T/H evaluation serves ``model``, the model its build task (:func:`stream_build`)
    shipped, with ``job.model`` its record."""
    end = JobResult(node=node_info(node_id))
    box = _Outbox()
    try:
        with _prepared(job, tasks, end.node) as (engine, taskset, export):

            def on_usage(usage: dict[str, int]) -> None:
                end.usage = usage

            todo = [taskset.tasks[t] for t in job.task_ids]
            on_done = lambda run: box.send("task", run=run)  # noqa: E731
            record = job.model
            if (engine.builder is not None) != (model is not None and record is not None):
                raise PackMismatch("a D/T/H evaluation runs with the model its build shipped")

            def work() -> None:
                try:
                    if model is None or record is None:
                        out = engine.run(export, todo, box.put, on_done)
                    else:
                        out = engine.run_model(
                            export,
                            todo,
                            box.put,
                            on_done,
                            model=(record, install_model(engine, model, record)),
                            on_usage=on_usage,
                            token_limit=job.token_limit,
                        )
                except BuildRejected as exc:
                    end.rejected = (exc.stage, exc.reason, exc.details)
                    return
                end.model, end.usage = out.model, out.usage

            yield from _drain(work, box.messages)
    except _Refused as exc:
        end.refused = str(exc)
    yield Message("end", box.take(), end=end)


def stream_build(job: Job, tasks: TaskPack, node_id: str = "") -> Iterator[Message | ModelPack]:
    """Build (or reuse) the candidate's D/T/H model here: the build record with its
    artifacts, the end, and then (when it built) the model's files for the evaluation."""
    end = JobResult(node=node_info(node_id))
    box = _Outbox()
    shipped: list[ModelPack] = []
    try:
        with _prepared(job, tasks, end.node) as (engine, _, export):

            def work() -> None:
                try:
                    built = engine.build_model(export, box.put)
                except BuildRejected as exc:
                    end.rejected = (exc.stage, exc.reason, exc.details)
                    return
                box.send("built", built=built.record())
                shipped.append(pack_model(built))

            yield from _drain(work, box.messages)
    except _Refused as exc:
        end.refused = str(exc)
    end.model_follows = bool(shipped)
    yield Message("end", box.take(), end=end)
    if shipped:
        yield shipped[0]


def evaluate(job: Job, tasks: TaskPack, node_id: str = "") -> JobResult:
    """:func:`stream` collected into one result (runs in task order, every artifact)."""
    result = JobResult(node=node_info(node_id))
    runs: dict[str, TaskRun] = {}
    for msg in stream(job, tasks, node_id):
        result.blobs.update(msg.blobs)
        if msg.built is not None:
            result.built = msg.built
        if msg.run is not None:
            runs[msg.run.task_id] = msg.run
        if msg.end is not None:
            built, blobs = result.built, result.blobs
            result = msg.end
            result.built, result.blobs = built, blobs
    result.runs = [runs[t] for t in job.task_ids if t in runs]
    return result
