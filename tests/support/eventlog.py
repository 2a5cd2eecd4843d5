"""Event logs written and edited by hand: a foreign key, signing callbacks, and the raw
lines of ``events.jsonl`` (the archive's and the loader's tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe.archive.log import (
    EVENTS,
    Archive,
)
from rsiframe.certs.signing import EVENT_TYPE, Signer

SIGNER = Signer(Ed25519PrivateKey.generate())


def sign_with(signer: Signer, payload_type: str = EVENT_TYPE) -> Callable[[bytes], str]:
    return lambda payload: signer.sign_bytes(payload_type, payload)


def event_lines(run: Path) -> list[bytes]:
    return (run / EVENTS).read_bytes().split(b"\n")[:-1]


def write_event_lines(run: Path, lines: list[bytes]) -> None:
    (run / EVENTS).write_bytes(b"".join(line + b"\n" for line in lines))


def fill(run: Path, n: int, signer: Signer = SIGNER) -> Archive:
    arc = Archive(run, None, sign=sign_with(signer))
    for i in range(n):
        arc.append(f"type{i}", {"i": i, "text": f"event {i}"})
    return arc
