"""Operator code identity: what code filled each slot, so one run cannot use two versions.

``recipe.lock.json`` holds, per slot, an identity made when the run began:

* ``file``: a ``path/file.py:Class`` operator: the file's sha256;
* ``module``: a ``module:Class`` operator: the sha256 of the file defining the class, plus
  the distribution's name and version when the module comes from one;
* ``entry_point``: a named operator from a third-party distribution: its name, version and
  the sha256 of its RECORD, plus the defining file's sha256;
* ``builtin``: a named operator shipped with rsiframe: rsiframe's version and the file's
  sha256;
* ``candidate``: a ``candidate:`` operator: nothing here, its code is in the candidate's
  own tree, which its commit already binds.

Each identity but a candidate's also holds ``files``: the sha256 of every file of the
operator's package (:mod:`rsiframe.slots.codefiles`: the local modules the defining file
imports, the ``__init__.py`` of each package on the way, an installed distribution's
RECORD), so an edit of ``tpops/__init__.py`` or of a helper module is a code change too.
``resume`` refuses a change (:func:`require_unchanged`); ``verify`` and ``status`` re-hash
the locked files without importing anything (:func:`drift`). A lock from before ``files``
is compared on the defining file alone.
"""

from __future__ import annotations

import inspect
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from rsiframe import __version__
from rsiframe.errors import LockMismatch
from rsiframe.slots import codefiles
from rsiframe.util.digest import sha256_bytes, sha256_json

GROUP = "rsiframe.operators"
CANDIDATE_PREFIX = "candidate:"


def file_digest(path: str | None) -> str | None:
    if not path:
        return None
    try:
        return sha256_bytes(Path(path).read_bytes())
    except OSError:
        return None


def _defining_file(cls: type) -> str | None:
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    if path is None:
        try:
            path = inspect.getsourcefile(cls)
        except TypeError:
            return None
    return str(Path(path).resolve()) if path else None


def _distribution_of(module: str) -> metadata.Distribution | None:
    top = module.split(".", 1)[0]
    for name in metadata.packages_distributions().get(top, []):
        try:
            return metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _entry_point_dist(
    slot: str, name: str, eps: metadata.EntryPoints | None = None
) -> metadata.Distribution | None:
    for ep in eps if eps is not None else metadata.entry_points(group=GROUP):
        if ep.name == f"{slot}.{name}":
            return ep.dist
    return None


def identity(
    slot: str, ref: str, cls: type, eps: metadata.EntryPoints | None = None
) -> dict[str, Any]:
    """The code identity of the operator ``ref`` (resolved to ``cls``) in ``slot``
    (``eps``: the installed entry points of :data:`GROUP`, when the caller has them)."""
    if ref.startswith(CANDIDATE_PREFIX):
        return {"ref": ref, "kind": "candidate"}
    file = _defining_file(cls)
    out: dict[str, Any] = {"ref": ref, "file": file, "sha256": file_digest(file)}
    if ":" in ref:
        target = ref.rpartition(":")[0]
        if target.endswith(".py") or "/" in target:
            return {**out, "kind": "file", "files": _package_files(cls, file)}
        dist = _distribution_of(cls.__module__)
        out["kind"] = "module"
        if dist is not None:
            out |= {"distribution": dist.metadata["Name"], "version": dist.version}
        return {**out, "files": _package_files(cls, file, dist)}
    dist = _entry_point_dist(slot, ref.removeprefix(slot + "."), eps)
    if dist is None or dist.metadata["Name"] == "rsiframe":
        files = _package_files(cls, file)
        return {**out, "kind": "builtin", "rsiframe": __version__, "files": files}
    record = dist.read_text("RECORD")
    return {
        **out,
        "kind": "entry_point",
        "distribution": dist.metadata["Name"],
        "version": dist.version,
        "record_sha256": sha256_bytes(record.encode()) if record is not None else None,
        "files": _package_files(cls, file, dist),
    }


def _package_files(
    cls: type, file: str | None, dist: metadata.Distribution | None = None
) -> dict[str, str | None]:
    """Path -> sha256 of every file of the operator's package (:mod:`codefiles`); ``dist``:
    the installed distribution it comes from, whose RECORD is locked too."""
    if file is None:
        return {}
    name: tuple[str, ...]
    if cls.__module__.startswith(codefiles.USER_MODULE):  # a file operator, loaded on its own
        roots, name = codefiles.file_roots(Path(file)), (Path(file).stem,)
    else:
        roots, name = codefiles.module_roots(cls.__module__), tuple(cls.__module__.split("."))
    found = codefiles.local_modules(Path(file), name, roots)
    if dist is not None and dist.metadata["Name"] != "rsiframe":
        found |= codefiles.distribution_files(dist)
    return {str(p): file_digest(str(p)) for p in sorted(found)}


def identities(resolved: Any) -> dict[str, Any]:
    """Per slot, the identity of its operator in a resolved recipe (what the lock holds)."""
    refs = {slot: spec["operator"] for slot, spec in resolved.data["slots"].items()}
    eps = metadata.entry_points(group=GROUP)  # once: it reads every installed distribution
    ops = resolved.operators.items()
    return {slot: identity(slot, refs[slot], cls, eps) for slot, (cls, _) in ops}


def _describe(slot: str, locked: dict[str, Any], now: dict[str, Any] | None) -> str | None:
    """Why ``now`` is not the ``locked`` identity, or None when it is."""
    ref = locked.get("ref", "?")
    if now is None:
        return f"slots.{slot}: {ref} is no longer in the recipe"
    if now.get("ref") != ref:
        return f"slots.{slot}: {ref} became {now.get('ref')}"
    for key in ("file", "sha256", "distribution", "version", "record_sha256", "rsiframe"):
        if locked.get(key) != now.get(key):
            what = {
                "file": f"now loads from {now.get('file')}",
                "sha256": f"code changed: {locked.get('file')}",
                "distribution": f"distribution {locked.get(key)} -> {now.get(key)}",
                "version": f"version {locked.get(key)} -> {now.get(key)}",
                "record_sha256": f"{locked.get('distribution')} was reinstalled (RECORD changed)",
                "rsiframe": f"rsiframe {locked.get(key)} -> {now.get(key)}",
            }[key]
            return f"slots.{slot}: operator {ref}: {what}"
    if "files" in locked:  # a lock from before ``files``: the defining file alone
        changed = changed_files(locked["files"], now.get("files") or {})
        if changed:
            return f"slots.{slot}: operator {ref}: code changed: {_first(changed)}"
    return None


def changed_files(locked: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The files whose digest differs, or which only one side has."""
    return sorted(p for p in locked.keys() | now.keys() if locked.get(p) != now.get(p))


def _first(paths: list[str]) -> str:
    return paths[0] + (f" (+{len(paths) - 1} more)" if len(paths) > 1 else "")


def locked_files(locked: dict[str, Any] | None) -> set[str]:
    """Every file the operator lock hashes."""
    out: set[str] = set()
    for ident in (locked or {}).values():
        out |= set(ident.get("files") or ([ident["file"]] if ident.get("file") else []))
    return out


def changes(locked: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """How the operators ``now`` differ from the ``locked`` ones; [] for a run without a lock
    of its operators (made before they were locked)."""
    if not locked:
        return []
    out = [_describe(slot, ident, now.get(slot)) for slot, ident in locked.items()]
    out += [f"slots.{slot}: {now[slot].get('ref')} is new" for slot in now if slot not in locked]
    return [x for x in out if x]


def lock_digest(locked: dict[str, Any] | None) -> str:
    """What ``run_started`` signs (``operators_digest``), so the lock cannot be edited to fit."""
    return sha256_json(locked or {})


def signed_lock_problems(locked: dict[str, Any] | None, run_started: dict[str, Any]) -> list[str]:
    """The lock's operator identities against the digest the run signed at its start."""
    signed = run_started.get("operators_digest")
    if signed is None or signed == lock_digest(locked):  # None: a run from before the lock
        return []
    return ["recipe.lock.json's operator identities differ from those the run signed at start"]


def require_unchanged(
    lock: dict[str, Any], run_started: dict[str, Any], resolved: Any, where: str
) -> None:
    """``resume``: refuse operator code that differs from the run's (signed) lock."""
    locked = lock.get("operators")
    problems = signed_lock_problems(locked, run_started)
    if problems:
        raise LockMismatch(problems[0], where=where)
    changed = changes(locked, identities(resolved))
    if changed:
        raise LockMismatch(
            f"operator code changed since the run began: {'; '.join(changed[:3])}", where=where
        )


def drift(locked: dict[str, Any] | None) -> list[str]:
    """Re-hash the locked operator files on disk (no import): which no longer match."""
    out = []
    for slot, ident in (locked or {}).items():
        if ident.get("kind") == "candidate" or not ident.get("file"):
            continue
        files = ident.get("files") or {ident["file"]: ident.get("sha256")}
        changed = [p for p, digest in sorted(files.items()) if file_digest(p) != digest]
        if changed:
            out.append(
                f"operator code on disk differs from the run's lock: slots.{slot} "
                f"{ident.get('ref')} ({_first(changed)})"
            )
        elif ident.get("distribution") and ident.get("version"):
            try:
                version = metadata.version(ident["distribution"])
            except metadata.PackageNotFoundError:
                version = None
            if version != ident["version"]:
                out.append(
                    f"operator distribution differs from the run's lock: slots.{slot} "
                    f"{ident['distribution']} {ident['version']} -> {version or 'not installed'}"
                )
    return out


def certificate_problems(
    locked: dict[str, Any] | None, certified: list[tuple[str, Any]]
) -> list[str]:
    """Certificates (``(label, predicate.code)``) whose gate code is not the locked gate's."""
    gate = (locked or {}).get("gate")
    if gate is None:
        return []
    return [
        f"{label}: its certificate names other gate code than the recipe lock"
        for label, code in certified
        if code is not None and code.get("gate") != gate
    ]
