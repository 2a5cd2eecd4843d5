"""events.py is the one declaration of every event: the engine writes only its models,
the fold reads only them, and older lines that lack optional keys still parse."""

from __future__ import annotations

import ast

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe.archive import events as E
from rsiframe.archive.log import Event
from rsiframe.archive.state import RunState
from rsiframe.certs.signing import RecordVerifier
from rsiframe.errors import ArchiveCorrupt
from tests.support.paths import REPO


def test_candidate_rejected_has_one_key_set() -> None:
    # the three shapes the engine wrote before events.py (operator, guardrail, build)
    old = [
        {"id": "c1", "stage": "mutate", "reasons": ["x"], "traceback": "a" * 64},
        {
            "id": "c1",
            "stage": "guardrail",
            "reasons": ["x"],
            "violations": [],
            "commit": None,
            "description": "d",
            "output": "",
            "sandbox": {},
        },
        {
            "id": "c1",
            "stage": "train",
            "reasons": ["x"],
            "commit": "b" * 40,
            "description": "d",
            "details": {"audit": {}},
        },
    ]
    keys = {frozenset(E.payload(E.parse("candidate_rejected", d))) for d in old}
    assert len(keys) == 1


def test_an_undeclared_key_or_type_is_malformed() -> None:
    with pytest.raises(ValueError):
        E.parse("candidate_abandoned", {"id": "c1", "reason": "r", "extra": 1})
    with pytest.raises(E.UnknownEvent):
        E.parse("candidate_teleported", {"id": "c1"})
    state = RunState(verifier=_verifier())
    with pytest.raises(ArchiveCorrupt, match="malformed"):
        state.apply(Event(0, "generation_started", {"generation": "x"}, 0.0, "", ""))


def test_every_declared_type_has_a_fold_handler() -> None:
    for name in E.EVENT_TYPES:
        assert callable(getattr(RunState, "_on_" + name, None)), name


def test_the_engine_appends_only_event_models() -> None:
    """No module but the archive itself calls ``.append("type", {...})`` with a raw dict."""
    for p in (REPO / "rsiframe").rglob("*.py"):
        if p.name == "archive.py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("append", "_append")
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in E.EVENT_TYPES
            ):
                raise AssertionError(f"{p.name}:{node.lineno} appends a raw {node.args[0].value}")


def _verifier() -> RecordVerifier:
    return RecordVerifier(Ed25519PrivateKey.generate().public_key())
