"""Task sets in Harbor's format: loading, content digests, splits, lock and fingerprint.

A task is a folder with ``task.toml``, ``instruction.md``, ``environment/`` and
``tests/test.sh`` (optional ``solution/``). Each task's digest covers every
path, its bytes and its executable bit; the task-set fingerprint is a Merkle
root over (split, task id, digest) and is what certificates bind.
"""

from __future__ import annotations

import hashlib
import os
import random
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsiframe.errors import TaskSetChanged, TaskSetError

SPLITS = ("train", "gate", "sealed")
#: the splits whose items training data must not contain (D/T/H contamination audit)
PROTECTED_SPLITS = ("gate", "sealed")


@dataclass(frozen=True)
class Task:
    """One task folder, parsed."""

    id: str
    path: Path
    instruction: str
    agent_timeout: float
    verifier_timeout: float
    agent_network: bool
    verifier_network: bool
    agent_env: dict[str, str] = field(default_factory=dict)
    verifier_env: dict[str, str] = field(default_factory=dict)
    #: the task's own resource limits (``[rsiframe]`` in task.toml: :data:`LIMIT_KEYS`)
    limits: dict[str, int] = field(default_factory=dict)


#: the keys of task.toml's ``[rsiframe]`` table: per-task limits of the agent and verifier
LIMIT_KEYS = ("memory_mb", "pids", "tmp_mb", "app_mb", "artifacts_mb")


def _limits(doc: dict[str, Any], where: str) -> dict[str, int]:
    table = _table(doc, "rsiframe", where)
    out = {}
    for key, value in table.items():
        if key not in LIMIT_KEYS:
            raise TaskSetError(
                f"task.toml: [rsiframe] {key} is not a limit ({', '.join(LIMIT_KEYS)})",
                where=where,
            )
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise TaskSetError(
                f"task.toml: [rsiframe] {key} must be a positive integer", where=where
            )
        out[key] = value
    return out


def _table(doc: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    """``[name]`` of a task.toml: a table, or empty when absent."""
    value = doc.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TaskSetError(f"task.toml: {name} must be a table", where=where)
    return value


def _phase_network(section: dict[str, Any], environment: dict[str, Any]) -> bool:
    mode = section.get("network_mode") or environment.get("network_mode")
    if mode is None and "allow_internet" in environment:  # Harbor's older spelling
        mode = "public" if environment["allow_internet"] else "no-network"
    # allowlists need a proxy the local engine does not have: they get no network at all
    return mode == "public"


def load_task(path: Path) -> Task:
    where = str(path)
    doc = _read_toml(path / "task.toml", where)
    sections = {
        name: _phase_table(doc, name, where) for name in ("agent", "verifier", "environment")
    }
    text = _read_instruction(path / "instruction.md", where)
    if not (path / "tests" / "test.sh").is_file():
        raise TaskSetError("task has no verifier (tests/test.sh is missing)", where=where)
    return Task(
        id=path.name,
        path=path,
        instruction=text,
        agent_timeout=_timeout(sections, "agent", where),
        verifier_timeout=_timeout(sections, "verifier", where),
        agent_network=_phase_network(sections["agent"], sections["environment"]),
        verifier_network=_phase_network(sections["verifier"], sections["environment"]),
        agent_env=_env(sections["agent"]),
        verifier_env=_env(sections["verifier"]),
        limits=_limits(doc, where),
    )


def _read_toml(toml_path: Path, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TaskSetError(f"task.toml is not valid TOML: {exc}", where=where) from exc
    except OSError as exc:
        raise TaskSetError(f"cannot read task.toml: {exc.strerror}", where=where) from exc
    except UnicodeDecodeError as exc:
        raise TaskSetError("task.toml is not UTF-8 text", where=where) from exc


def _phase_table(doc: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    """``[agent]``, ``[verifier]`` or ``[environment]``, whose ``env`` must be a table."""
    section = _table(doc, name, where)
    if not isinstance(section.get("env") or {}, dict):
        raise TaskSetError(f"task.toml: [{name}] env must be a table", where=where)
    return section


def _read_instruction(instruction: Path, where: str) -> str:
    if not instruction.is_file():
        raise TaskSetError("task has no instruction.md", where=where)
    try:
        return instruction.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskSetError(f"cannot read instruction.md: {exc}", where=where) from exc


def _timeout(sections: dict[str, dict[str, Any]], phase: str, where: str) -> float:
    value = sections[phase].get("timeout_sec", 600.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise TaskSetError(f"[{phase}] timeout_sec must be a positive number", where=where)
    return float(value)


def _env(section: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (section.get("env") or {}).items()}


def file_rows(path: Path) -> dict[str, str]:
    """``{relative path: "<kind>:<sha256>"}`` for every file under ``path``.

    kind is ``f`` (file), ``x`` (executable) or ``l`` (symlink, hashing its target).
    """
    rows: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in sorted(filenames + links):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                rows[rel] = "l:" + hashlib.sha256(os.fsencode(os.readlink(full))).hexdigest()
            elif stat.S_ISREG(st.st_mode):
                kind = "x" if st.st_mode & stat.S_IXUSR else "f"
                with open(full, "rb") as f:
                    rows[rel] = kind + ":" + hashlib.sha256(f.read()).hexdigest()
    return rows


def task_digest(rows: dict[str, str]) -> str:
    h = hashlib.sha256()
    for rel in sorted(rows):
        h.update(f"{rel}\0{rows[rel]}\n".encode())
    return h.hexdigest()


def merkle_root(leaves: list[tuple[str, str, str]]) -> str:
    """Merkle root over sorted (split, task id, digest) leaves."""
    level = [hashlib.sha256(f"leaf\0{s}\0{t}\0{d}".encode()).digest() for s, t, d in sorted(leaves)]
    if not level:
        return hashlib.sha256(b"empty").hexdigest()
    while len(level) > 1:
        nxt = [
            hashlib.sha256(b"node\0" + level[i] + level[i + 1]).digest()
            for i in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0].hex()


@dataclass
class TaskSet:
    """The tasks found under one folder (immediate subfolders holding a task.toml)."""

    root: Path
    tasks: dict[str, Task]

    @classmethod
    def load(cls, root: Path) -> TaskSet:
        if not root.is_dir():
            raise TaskSetError("task set folder not found", where=str(root))
        tasks = {}
        for child in sorted(root.iterdir()):
            if child.is_dir() and (child / "task.toml").is_file():
                tasks[child.name] = load_task(child)
        if not tasks:
            raise TaskSetError("no tasks found (no subfolder holds a task.toml)", where=str(root))
        return cls(root=root, tasks=tasks)


def tasks_by_split(
    taskset: TaskSet,
    split: Mapping[str, list[str]],
    splits: Sequence[str] = PROTECTED_SPLITS,
) -> dict[str, list[Task]]:
    """The tasks of each of ``splits``; by default those a build's training data must not hold."""
    return {s: [taskset.tasks[t] for t in split[s]] for s in splits}


def make_split(
    ids: list[str],
    *,
    lists: Mapping[str, list[str]] | None = None,
    ratios: Mapping[str, float] | None = None,
    seed: int = 0,
) -> dict[str, list[str]]:
    """Split task ids into train/gate/sealed, from explicit lists or ratios with a seed."""
    if lists is not None:
        split = {s: list(lists.get(s, [])) for s in SPLITS}
        seen: dict[str, str] = {}
        for s, members in split.items():
            for tid in members:
                if tid not in ids:
                    raise TaskSetError(f"split {s} names unknown task {tid!r}", where="tasks.split")
                if tid in seen:
                    raise TaskSetError(
                        f"task {tid!r} is in both {seen[tid]} and {s}", where="tasks.split"
                    )
                seen[tid] = s
    else:
        ratios = ratios or {"train": 0.5, "gate": 0.3, "sealed": 0.2}
        order = sorted(ids)
        random.Random(seed).shuffle(order)
        n = len(order)
        n_train = round(n * ratios.get("train", 0.0))
        n_gate = round(n * ratios.get("gate", 0.0))
        n_sealed = min(n - n_train - n_gate, round(n * ratios.get("sealed", 0.0)))
        split = {
            "train": sorted(order[:n_train]),
            "gate": sorted(order[n_train : n_train + n_gate]),
            "sealed": sorted(order[n_train + n_gate : n_train + n_gate + max(n_sealed, 0)]),
        }
    for s in SPLITS:
        if not split[s]:
            raise TaskSetError(f"split {s} is empty", where="tasks.split")
    return split


@dataclass
class TaskLock:
    """What a run froze at start: per task its split, digest and file rows."""

    root: str
    split: dict[str, list[str]]
    files: dict[str, dict[str, str]]  # task id -> file rows

    @classmethod
    def freeze(cls, taskset: TaskSet, split: dict[str, list[str]]) -> TaskLock:
        files = {tid: file_rows(taskset.tasks[tid].path) for s in SPLITS for tid in split[s]}
        return cls(root=str(taskset.root), split=split, files=files)

    def digest(self, task_id: str) -> str:
        return task_digest(self.files[task_id])

    @property
    def fingerprint(self) -> str:
        return merkle_root([(s, t, self.digest(t)) for s in SPLITS for t in self.split[s]])

    def split_of(self, task_id: str) -> str:
        for s in SPLITS:
            if task_id in self.split[s]:
                return s
        raise KeyError(task_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "fingerprint": self.fingerprint,
            "split": self.split,
            "tasks": {t: {"digest": self.digest(t), "files": self.files[t]} for t in self.files},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskLock:
        try:
            lock = cls(
                root=str(data["root"]),
                split={s: [str(t) for t in data["split"][s]] for s in SPLITS},
                files={str(t): dict(v["files"]) for t, v in data["tasks"].items()},
            )
            fingerprint = lock.fingerprint  # every task of the split has its rows
            recorded = data["fingerprint"]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise TaskSetChanged(f"tasks.lock.json is malformed ({exc!r})") from exc
        if fingerprint != recorded:
            raise TaskSetChanged("task lock's fingerprint does not match its contents")
        return lock

    def check(self, splits: tuple[str, ...] = SPLITS) -> None:
        """Raise :class:`TaskSetChanged` naming the first task file that differs on disk."""
        for s in splits:
            for tid in self.split[s]:
                path = Path(self.root) / tid
                now = file_rows(path) if path.is_dir() else {}
                then = self.files[tid]
                if now == then:
                    continue
                changed = sorted(set(now) ^ set(then)) or sorted(
                    p for p in now if now[p] != then.get(p)
                )
                raise TaskSetChanged(
                    f"task set changed since the run began: {s}/{tid}/{changed[0]}",
                    where=str(self.root),
                )
