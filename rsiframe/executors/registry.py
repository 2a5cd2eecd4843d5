"""Executors by ``evaluator.executor.kind`` (the table is
:data:`rsiframe.recipe.executor.EXECUTORS`): each imported only when a run or its preflight
asks for it, with an error naming what to install; ``--ray-address`` applied per session.
"""

from __future__ import annotations

import importlib
from typing import Any

from pydantic import ValidationError

from rsiframe.errors import ClusterError
from rsiframe.executors.base import Executor
from rsiframe.recipe.executor import EXECUTORS, ExecutorSpec, with_address


def _load(ref: str, kind: str) -> Any:
    module, _, attr = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        install = EXECUTORS[kind].install
        hint = f"; install it with: {install}" if install else ""
        raise ClusterError(f"the {kind!r} executor cannot load ({exc}){hint}") from exc


def session_spec(spec: ExecutorSpec, ray_address: str | None) -> tuple[ExecutorSpec, str]:
    """The recipe's executor with ``--ray-address`` applied, and the key errors name."""
    if ray_address is None:
        return spec, "evaluator.executor"
    try:
        return with_address(spec, ray_address), "--ray-address"
    except ValidationError as exc:
        raise ClusterError(f"--ray-address: {exc.errors()[0]['msg']}") from exc


def check(spec: ExecutorSpec, key: str = "evaluator.executor", engine: str = "local") -> None:
    """Preflight, before a run folder exists: Ray is installed and the address answers."""
    if spec.kind == "ray" and engine != "local":
        raise ClusterError(f"{key}: the Ray executor runs the local engine, not {engine!r}")
    preflight = EXECUTORS[spec.kind].preflight
    if preflight is not None:
        _load(preflight, spec.kind)(spec, key)


def open_executor(spec: ExecutorSpec, key: str = "evaluator.executor") -> Executor:
    """The executor a run uses this session (for ``ray``: connected, or a private instance)."""
    kind = EXECUTORS[spec.kind]
    factory = _load(f"{kind.module}:{kind.cls}", spec.kind)
    executor: Executor = factory() if spec.kind == "local" else factory(spec, key)
    return executor
