"""rsiframe.evaluators.registry: an engine imported by name only when asked for, with an
error naming what to install; the evaluator lock's parts and what changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsiframe.errors import EngineUnavailable, LockMismatch
from rsiframe.evaluators import registry
from rsiframe.evaluators.registry import (
    build_evaluator,
    evaluator_changes,
    evaluator_parts,
    make_evaluator,
)
from rsiframe.recipe.evaluator import ENGINES, EngineSpec, LocalEngineConfig


def test_an_engine_is_built_from_its_config_with_the_options_it_takes(tmp_path: Path) -> None:
    engine = build_evaluator(
        "local", LocalEngineConfig(agent="true", sandbox="process"), tmp_path,
        parallel=3, not_an_option=1,
    )  # fmt: skip
    try:
        parts = evaluator_parts(engine)
        assert parts["fingerprint"] == engine.fingerprint() and parts["isolation"] == "process"
        assert type(engine).__module__ == ENGINES["local"].module
    finally:
        engine.close()


def test_what_changed_in_an_evaluator_lock() -> None:
    locked = {"fingerprint": "a", "isolation": "bwrap", "engine": "local"}
    assert evaluator_changes({**locked, "fingerprint": "b", "isolation": "process"}, locked) == [
        "isolation"
    ]
    assert evaluator_changes({**locked, "fingerprint": "b"}, locked) == ["code"]


def test_a_frozen_evaluator_that_cannot_be_rebuilt_here_is_a_lock_mismatch(tmp_path: Path) -> None:
    with pytest.raises(LockMismatch, match="engine 'podman' is not installed here"):
        make_evaluator("podman", {}, tmp_path)
    with pytest.raises(LockMismatch, match="evaluator config is not valid here"):
        make_evaluator("local", {"agent": "x", "sandbox": "chroot"}, tmp_path)


def test_an_engine_that_cannot_import_names_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = EngineSpec(
        LocalEngineConfig, "no_such_engine_module", "Engine", "x:y", "pip install it"
    )
    monkeypatch.setitem(ENGINES, "ghost", missing)
    with pytest.raises(
        EngineUnavailable,
        match=r"'ghost' evaluator engine cannot load .*; install it with: pip install it",
    ):
        registry.engine_class("ghost")
