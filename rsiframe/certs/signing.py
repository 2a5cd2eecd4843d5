"""Ed25519 keys and DSSE envelopes.

The private key of a run lives outside the run folder, in the user's data
directory with mode 0600; the public key is written into the run folder so
anyone holding the folder can verify every envelope.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from rsiframe.certs.keys import key_dir
from rsiframe.errors import KeyMissing
from rsiframe.util.digest import canonical_json, sha256_bytes

PAYLOAD_TYPE = "application/vnd.in-toto+json"
#: archive events are signed under their own payload type, so an event signature can
#: never be passed off as a certificate (or the reverse)
EVENT_TYPE = "application/vnd.rsiframe.event+json"


class BadSignature(Exception):
    """An envelope does not verify under the run's public key."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def _raw_public(pub: Ed25519PublicKey) -> bytes:
    return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class Signer:
    """Signs statements with a run's private key."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public = RecordVerifier(key.public_key())

    @property
    def keyid(self) -> str:
        return self.public.keyid

    def sign_bytes(self, payload_type: str, payload: bytes) -> str:
        """A bare base64 signature over DSSE's PAE of (payload_type, payload)."""
        return base64.b64encode(self._key.sign(pae(payload_type, payload))).decode()

    def sign(self, statement: dict[str, Any]) -> dict[str, Any]:
        payload = canonical_json(statement)
        sig = self._key.sign(pae(PAYLOAD_TYPE, payload))
        return {
            "payloadType": PAYLOAD_TYPE,
            "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": self.keyid, "sig": base64.b64encode(sig).decode()}],
        }


class RecordVerifier:
    """Verifies envelopes with only a public key."""

    def __init__(self, pub: Ed25519PublicKey) -> None:
        self._pub = pub
        self.keyid = sha256_bytes(_raw_public(pub))

    @classmethod
    def from_pem(cls, pem: bytes) -> RecordVerifier:
        key = serialization.load_pem_public_key(pem)
        if not isinstance(key, Ed25519PublicKey):
            raise BadSignature("public key is not an Ed25519 key")
        return cls(key)

    def pem(self) -> bytes:
        return self._pub.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def check_bytes(self, payload_type: str, payload: bytes, sig: str) -> bool:
        try:
            self._pub.verify(base64.b64decode(sig, validate=True), pae(payload_type, payload))
        except (InvalidSignature, ValueError, TypeError):
            return False
        return True

    def open(self, envelope: dict[str, Any]) -> dict[str, Any]:
        """Return the statement inside ``envelope`` if a signature by this key verifies."""
        try:
            if envelope["payloadType"] != PAYLOAD_TYPE:
                raise BadSignature(f"unexpected payload type {envelope['payloadType']!r}")
            payload = base64.b64decode(envelope["payload"], validate=True)
            sigs = [
                s
                for s in envelope["signatures"]
                if isinstance(s, dict) and s.get("keyid") == self.keyid
            ]
            if not sigs:
                raise BadSignature("no signature by the run's key")
            self._pub.verify(
                base64.b64decode(sigs[0]["sig"], validate=True), pae(PAYLOAD_TYPE, payload)
            )
            statement = json.loads(payload)
        except InvalidSignature as exc:
            raise BadSignature("signature does not verify") from exc
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BadSignature(f"malformed envelope: {exc}") from exc
        if not isinstance(statement, dict):
            raise BadSignature("statement is not an object")
        return statement


def create_signer(run_id: str) -> Signer:
    """Create a fresh key pair for ``run_id``; the private key goes to :func:`key_dir`."""
    key = Ed25519PrivateKey.generate()
    directory = key_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"{run_id}.pem"
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
        f.flush()
        os.fsync(f.fileno())
    return Signer(key)


def load_signer(run_id: str, keyid: str) -> Signer:
    path = key_dir() / f"{run_id}.pem"
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise KeyMissing(f"the run's signing key is not on this machine: {path}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyMissing(f"{path} is not an Ed25519 private key")
    signer = Signer(key)
    if signer.keyid != keyid:
        raise KeyMissing(f"{path} does not match the run's public key")
    return signer
