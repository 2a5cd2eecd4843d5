"""Recipe trees before validation: ``extends:`` merging, ``--set``/``--unset``, run labels.

Rules, the same for an ``extends:`` file and for the command line:

* mappings merge key by key; anything else is replaced;
* ``KEY: null`` over a mapping removes that mapping (over a value it sets ``null``,
  which for a budget limit means unlimited);
* naming a different operator for a slot replaces the slot's config: the inherited
  config belonged to the old operator, so only config given with the new one is kept.

On the command line, ``--set KEY=<yaml mapping>`` replaces the mapping at KEY whole
(later ``--set`` items may still set keys inside it), ``--unset KEY`` removes KEY,
and the order of ``--set`` items does not matter for an operator switch.
A run made with overrides gets a label naming them (:func:`run_label`).
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rsiframe import yamlsafe
from rsiframe.errors import RecipeError

PATH_KEYS = (("seed",), ("tasks", "path"))
_LABEL_PIECE = 40


@dataclass
class _Replace:
    """A mapping given whole on the command line: it replaces, it does not merge."""

    value: dict[str, Any]


class _Delete:
    """``--unset KEY``."""


DELETE = _Delete()


def absolutize(data: dict[str, Any], base: Path) -> None:
    """Make the recipe's path keys, file operators and prompt templates absolute against
    ``base``."""
    for keys in PATH_KEYS:
        node: Any = data
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(keys[-1]), str):
            node[keys[-1]] = str((base / node[keys[-1]]).resolve())
    slots = data.get("slots")
    if isinstance(slots, dict):
        for spec in slots.values():
            op = spec.get("operator") if isinstance(spec, dict) else None
            if isinstance(op, str) and ":" in op and not op.startswith("candidate:"):
                target, _, attr = op.rpartition(":")
                if target.endswith(".py") or "/" in target:
                    spec["operator"] = f"{(base / target).resolve()}:{attr}"
            config = spec.get("config") if isinstance(spec, dict) else None
            if isinstance(config, dict) and isinstance(config.get("template"), str):
                # a model operator's prompt template (a file beside the recipe)
                config["template"] = str((base / config["template"]).resolve())


def merge(base: dict[str, Any], over: dict[str, Any], path: tuple[str, ...] = ()) -> dict[str, Any]:
    """Deep merge ``over`` onto ``base`` (inputs untouched) by the rules above."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        here = (*path, key)
        old = out.get(key)
        if isinstance(value, _Delete) or (value is None and isinstance(old, dict)):
            out.pop(key, None)
        elif isinstance(value, _Replace):
            out[key] = merge({}, value.value, here)
        elif isinstance(old, dict) and isinstance(value, dict):
            if len(here) == 2 and here[0] == "slots" and _switches_operator(old, value):
                old = {k: v for k, v in old.items() if k != "config"}
            out[key] = merge(old, value, here)
        elif isinstance(value, dict):
            out[key] = merge({}, value, here)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _switches_operator(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return "operator" in new and new["operator"] != old.get("operator")


def parse_set(item: str) -> tuple[list[str], Any]:
    """``a.b=VALUE`` → (["a", "b"], VALUE parsed as YAML)."""
    key, eq, raw = item.partition("=")
    keys = [k.strip() for k in key.split(".")]
    if not eq or not all(keys):
        raise RecipeError(f"--set expects KEY=VALUE, got {item!r}")
    try:
        value = yamlsafe.load(raw) if raw.strip() else ""  # no aliases, no duplicate keys
    except yaml.YAMLError:
        value = raw
    return keys, value


def _unset_keys(item: str) -> list[str]:
    keys = [k.strip() for k in item.split(".")]
    if not all(keys) or "=" in item:
        raise RecipeError(f"--unset expects a KEY (a.b.c), got {item!r}")
    return keys


def overrides(
    items: list[str], cwd: Path, unsets: list[str] | tuple[str, ...] = ()
) -> dict[str, Any]:
    """Turn ``--set`` and ``--unset`` items into one mapping to :func:`merge` over a recipe.

    Paths given on the command line resolve against ``cwd``. ``--unset`` items apply
    first, then ``--set`` items in order (a later one wins).
    """
    over: dict[str, Any] = {}
    # removals first, so `--unset tasks.split --set tasks.split.train=[...]` rebuilds it
    steps: list[tuple[list[str], Any, str]] = [
        (_unset_keys(item), DELETE, f"--unset {item}") for item in unsets
    ]
    steps += [(keys, value, item) for item in items for keys, value in [parse_set(item)]]
    for keys, value, item in steps:
        single: dict[str, Any] = {}
        node = single
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = copy.deepcopy(value)
        absolutize(single, cwd)
        value = _leaf(single, keys)
        node = over
        for k in keys[:-1]:
            nxt = node.get(k)
            if isinstance(nxt, _Replace):
                nxt = nxt.value
            elif isinstance(nxt, _Delete):  # removed, then built anew: replaces the old one
                fresh = _Replace({})
                node[k], nxt = fresh, fresh.value
            elif nxt is None:
                nxt = node[k] = {}
            elif not isinstance(nxt, dict):
                raise RecipeError(f"--set {item}: {k} is set to a value and a mapping")
            node = nxt
        node[keys[-1]] = _Replace(value) if isinstance(value, dict) else value
    return over


def _leaf(tree: dict[str, Any], keys: list[str]) -> Any:
    node: Any = tree
    for k in keys:
        node = node[k]
    return node


def run_label(items: list[str], unsets: list[str] | tuple[str, ...] = ()) -> str:
    """What a run made with overrides changed, for its name: ``select=best,budget.max_...=2``.

    Empty when there is nothing to say or when the overrides name the run themselves.
    """
    pieces: list[str] = []
    for item in items:
        keys, value = parse_set(item)
        if keys == ["name"]:
            return ""
        raw = item.partition("=")[2].strip()
        if keys[0] == "slots" and len(keys) >= 2:
            slot, rest = keys[1], keys[2:]
            if not rest and isinstance(value, dict) and "operator" in value:
                pieces.append(f"{slot}={value['operator']}")
                config = value.get("config")
                if isinstance(config, dict):
                    pieces += [f"{slot}.{k}={_flow(v)}" for k, v in config.items()]
                continue
            if rest == ["operator"]:
                pieces.append(f"{slot}={raw}")
                continue
            if rest[:1] == ["config"] and len(rest) > 1:
                rest = rest[1:]
            pieces.append(".".join([slot, *rest]) + f"={raw}")
        else:
            pieces.append(f"{'.'.join(keys)}={raw}")
    pieces += [f"-{item.strip()}" for item in unsets]
    clean = [_clean(p) for p in pieces]
    return ",".join(p for p in clean if p)


def _flow(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return str(value)


def _clean(piece: str) -> str:
    piece = re.sub(r"[\[\]\s]+", " ", piece).strip().replace(" ", "")
    return piece if len(piece) <= _LABEL_PIECE else piece[: _LABEL_PIECE - 1] + "…"


def labelled(name: str, label: str) -> str:
    """``sat3-quickstart`` + ``select=best`` → ``sat3-quickstart[select=best]``."""
    return f"{name}[{label}]" if label else name


#: the longest run name a folder (and the run's key file) takes; longer ones are cut
FOLDER_NAME_MAX = 96


def folder_safe(name: str) -> str:
    """A run name as a folder name: ``a[select=best]`` → ``a.select=best``; a name longer
    than ``FOLDER_NAME_MAX`` (many ``--set``) is cut, with a digest of the whole name."""
    safe = re.sub(r"[^A-Za-z0-9._=,+-]+", ".", name).strip(".") or "run"
    if len(safe) > FOLDER_NAME_MAX:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        safe = f"{safe[: FOLDER_NAME_MAX - 9].rstrip('.')}.{digest}"
    return safe
