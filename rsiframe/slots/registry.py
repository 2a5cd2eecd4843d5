"""Finding operators: entry points (built-ins too), ``module:Class`` or ``file.py:Class``.

``candidate:PATH:Class`` names an *untrusted* operator whose code lives in the
candidate's own tree; it never loads here but resolves to a host-side proxy
that runs the code out of process (:mod:`rsiframe.slots.untrusted`).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

from rsiframe.api import SLOT_BASES, SLOT_TABLE, SLOTS, Operator
from rsiframe.errors import OperatorNotFound
from rsiframe.slots.codefiles import USER_MODULE
from rsiframe.slots.untrusted import PREFIX as CANDIDATE_PREFIX
from rsiframe.slots.untrusted import operator_class as untrusted_class
from rsiframe.util.digest import sha256_bytes

GROUP = "rsiframe.operators"


@dataclass(frozen=True)
class OperatorInfo:
    slot: str
    name: str
    ref: str  # where it comes from: the entry point value, module:Class or file:Class


@cache
def installed() -> dict[tuple[str, str], OperatorInfo]:
    """Every operator registered under the entry-point group, keyed by (slot, name)."""
    found: dict[tuple[str, str], OperatorInfo] = {}
    for ep in entry_points(group=GROUP):
        slot, _, name = ep.name.partition(".")
        if slot in SLOTS and name:
            found[(slot, name)] = OperatorInfo(slot, name, ep.value)
    return found


def _load_ref(ref: str, base_dir: Path | None) -> type:
    target, _, attr = ref.rpartition(":")
    if not target or not attr:
        raise OperatorNotFound(f"{ref!r} is not module:Class or path/file.py:Class")
    if target.endswith(".py") or "/" in target:
        path = Path(target)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_file():
            raise OperatorNotFound(f"operator file not found: {path}")
        modname = USER_MODULE + sha256_bytes(str(path.resolve()).encode())[:12]
        module = sys.modules.get(modname)
        if module is None:
            spec = importlib.util.spec_from_file_location(modname, path)
            if spec is None or spec.loader is None:
                raise OperatorNotFound(f"cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[modname] = module
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[modname]
                raise OperatorNotFound(f"importing {path} failed: {exc}") from exc
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise OperatorNotFound(f"cannot import module {target!r}: {exc}") from exc
    cls = getattr(module, attr, None)
    if cls is None:
        raise OperatorNotFound(f"{target} has no attribute {attr!r}")
    return cls


def resolve(slot: str, ref: str, base_dir: Path | None = None) -> type[Operator]:
    """The operator class for ``ref`` in ``slot``; errors suggest close names."""
    if ref.startswith(CANDIDATE_PREFIX):
        return untrusted_class(slot, ref)
    if ":" in ref:
        cls = _load_ref(ref, base_dir)
    else:
        name = ref.removeprefix(slot + ".")
        info = installed().get((slot, name))
        if info is None:
            raise OperatorNotFound(_unknown_message(slot, name))
        cls = _load_ref(info.ref, None)
    base = SLOT_BASES[slot]
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise OperatorNotFound(f"{ref} is not a {slot} operator (subclass {base.__name__})")
    extra = set(getattr(cls, "grants", frozenset())) - SLOT_TABLE[slot].grantable
    if extra:
        raise OperatorNotFound(
            f"{ref} declares grants its slot does not allow: {', '.join(sorted(extra))}"
        )
    return cls


def _unknown_message(slot: str, name: str) -> str:
    same_slot = sorted(n for s, n in installed() if s == slot)
    msg = f"unknown {slot} operator {name!r}"
    close = difflib.get_close_matches(name, same_slot, n=3, cutoff=0.5)
    if close:
        msg += f" (did you mean {', '.join(repr(c) for c in close)}?)"
    else:
        elsewhere = sorted(s for s, n in installed() if n == name)
        if elsewhere:
            msg += f" ({name!r} is a {'/'.join(elsewhere)} operator)"
        elif same_slot:
            msg += f"; available: {', '.join(same_slot)}"
    return msg


def describe(name: str) -> tuple[OperatorInfo, type[Operator]]:
    """Find an operator by ``name`` or ``slot.name`` for ``operators describe``."""
    slot, _, short = name.rpartition(".")
    matches = [
        info
        for (s, n), info in installed().items()
        if n == (short if slot else name) and (not slot or s == slot)
    ]
    if not matches:
        names = sorted(f"{s}.{n}" for s, n in installed())
        close = difflib.get_close_matches(name, names + [n for _, n in installed()], n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise OperatorNotFound(f"unknown operator {name!r}{hint}")
    if len(matches) > 1:
        raise OperatorNotFound(
            f"{name!r} is ambiguous: {', '.join(f'{m.slot}.{m.name}' for m in matches)}"
        )
    info = matches[0]
    return info, resolve(info.slot, info.name)
