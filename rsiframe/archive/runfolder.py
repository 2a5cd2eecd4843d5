"""The layout of one run folder, its lock files and the lock that marks a live run.

::

    <run>/recipe.yaml          resolved recipe, frozen at start
    <run>/recipe.lock.json     its digest and resolved form
    <run>/tasks.lock.json      split, per-task file digests, task-set fingerprint
    <run>/evaluator.lock.json  evaluator fingerprint and its parts
    <run>/pubkey.pem           public half of the run's signing key
    <run>/events.jsonl         hash-chained events (the archive)
    <run>/artifacts/sha256/    content-addressed trajectories, logs, analyses
    <run>/repo.git/            one commit per candidate
    <run>/work/                scratch (mutation folders, exports); safe to delete
    <run>/run.lock             held (flock) while a process drives the run
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsiframe.archive.log import EVENTS, write_atomic
from rsiframe.certs.keys import protect
from rsiframe.errors import RunFolderError
from rsiframe.util.digest import canonical_json


@dataclass(frozen=True)
class RunPaths:
    root: Path

    @property
    def recipe(self) -> Path:
        return self.root / "recipe.yaml"

    @property
    def recipe_lock(self) -> Path:
        return self.root / "recipe.lock.json"

    @property
    def tasks_lock(self) -> Path:
        return self.root / "tasks.lock.json"

    @property
    def evaluator_lock(self) -> Path:
        return self.root / "evaluator.lock.json"

    @property
    def pubkey(self) -> Path:
        return self.root / "pubkey.pem"

    @property
    def events(self) -> Path:
        return self.root / EVENTS

    @property
    def repo(self) -> Path:
        return self.root / "repo.git"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def lockfile(self) -> Path:
        return self.root / "run.lock"

    def check(self) -> RunPaths:
        """Raise unless this looks like a run folder."""
        if not self.root.is_dir():
            raise RunFolderError("run folder not found", where=str(self.root))
        for p in (self.events, self.pubkey, self.recipe_lock):
            if not p.exists():
                raise RunFolderError(
                    f"not a run folder ({p.name} is missing)", where=str(self.root)
                )
        return self

    def write_json(self, path: Path, value: Any) -> None:
        write_atomic(path, canonical_json(value) + b"\n")

    def read_json(self, path: Path) -> dict[str, Any]:
        try:
            value = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise RunFolderError(f"{path.name} is missing", where=str(self.root)) from exc
        except ValueError as exc:  # UnicodeDecodeError too
            raise RunFolderError(f"{path.name} is not valid JSON", where=str(self.root)) from exc
        if not isinstance(value, dict):
            raise RunFolderError(f"{path.name} is not a JSON object", where=str(self.root))
        return value


#: set in a driver's environment while it holds its run's lock, so every process it starts
#: carries it (``driver_marker``): what a driver killed with SIGKILL left running is found
#: by it (:mod:`rsiframe.engine.leftovers`); sandboxed commands never see it (their
#: environment is built from scratch)
DRIVER_ENV = "RSIFRAME_DRIVER"


def driver_marker(paths: RunPaths, pid: int) -> str:
    """The value of ``DRIVER_ENV`` in the processes the driver ``pid`` of a run starts."""
    return f"{paths.root}:{pid}"


class RunLock:
    """An exclusive flock on ``run.lock``; a second driver of the same run is refused."""

    def __init__(self, paths: RunPaths) -> None:
        self.paths = paths
        self._fd: int | None = None

    def acquire(self, wait_s: float = 3.0) -> RunLock:
        """Take the lock; a holder still there after ``wait_s`` is a live driver (a driver
        killed a moment ago can hold it while the kernel tears its process down)."""
        fd = os.open(self.paths.lockfile, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                os.close(fd)
                pid = self.holder()
                raise RunFolderError(
                    "the run is already being driven by another process"
                    + (f" (pid {pid})" if pid is not None else ""),
                    where=str(self.paths.root),
                ) from exc
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        os.environ[DRIVER_ENV] = driver_marker(self.paths, os.getpid())
        # no privileged (set-up) sandbox of this process may mount the live run's folder
        protect(self.paths.root, self.paths.work)
        return self

    def holder(self) -> int | None:
        """The pid the lock file names: the driver that holds the lock, or held it last."""
        try:
            return int(self.paths.lockfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def release(self) -> None:
        if os.environ.get(DRIVER_ENV) == driver_marker(self.paths, os.getpid()):
            del os.environ[DRIVER_ENV]
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def is_live(paths: RunPaths) -> bool:
    """True while some process holds the run's lock (read-only probe)."""
    try:
        fd = os.open(paths.lockfile, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return False
