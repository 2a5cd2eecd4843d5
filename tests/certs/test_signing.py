"""rsiframe.certs.signing: Ed25519 run keys and DSSE envelopes."""

from __future__ import annotations

import base64
import copy
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from rsiframe.certs.signing import (
    EVENT_TYPE,
    PAYLOAD_TYPE,
    BadSignature,
    RecordVerifier,
    Signer,
    create_signer,
    load_signer,
    pae,
)
from rsiframe.errors import KeyMissing
from rsiframe.util.digest import canonical_json, sha256_bytes

STATEMENT = {"_type": "https://in-toto.io/Statement/v1", "subject": [], "n": 1, "é": "ü"}


def test_create_signer_writes_private_key_0600(keys: Path) -> None:
    signer = create_signer("run-1")
    path = keys / "run-1.pem"
    assert path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert signer.keyid == sha256_bytes(raw)
    assert len(signer.keyid) == 64


def test_create_signer_refuses_to_overwrite(keys: Path) -> None:
    create_signer("run-1")
    before = (keys / "run-1.pem").read_bytes()
    with pytest.raises(FileExistsError):
        create_signer("run-1")
    assert (keys / "run-1.pem").read_bytes() == before


def test_create_signer_refuses_to_follow_a_planted_symlink(keys: Path, tmp_path: Path) -> None:
    keys.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("do not touch")
    (keys / "run-x.pem").symlink_to(victim)
    with pytest.raises(FileExistsError):
        create_signer("run-x")
    assert victim.read_text() == "do not touch"


def test_sign_and_open_round_trip(keys: Path) -> None:
    signer = create_signer("r")
    env = signer.sign(STATEMENT)
    assert env["payloadType"] == PAYLOAD_TYPE
    assert base64.b64decode(env["payload"]) == canonical_json(STATEMENT)
    assert env["signatures"][0]["keyid"] == signer.keyid
    assert signer.public.open(env) == STATEMENT
    # the envelope survives a JSON round trip (as it does on disk)
    assert signer.public.open(json.loads(json.dumps(env))) == STATEMENT


def test_load_signer_gives_the_same_key(keys: Path) -> None:
    signer = create_signer("r")
    loaded = load_signer("r", signer.keyid)
    assert loaded.keyid == signer.keyid
    assert signer.public.open(loaded.sign({"x": 1})) == {"x": 1}


def test_load_signer_missing_key(keys: Path) -> None:
    with pytest.raises(KeyMissing, match="not on this machine"):
        load_signer("absent", "0" * 64)


def test_load_signer_with_mismatching_keyid(keys: Path) -> None:
    create_signer("r")
    with pytest.raises(KeyMissing, match="does not match"):
        load_signer("r", "f" * 64)


def test_load_signer_with_a_non_ed25519_key(keys: Path) -> None:
    keys.mkdir()
    pem = generate_private_key(SECP256R1()).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (keys / "ec.pem").write_bytes(pem)
    with pytest.raises(KeyMissing, match="not an Ed25519"):
        load_signer("ec", "0" * 64)


def test_verifier_from_pem(keys: Path) -> None:
    signer = create_signer("r")
    pem = signer.public.pem()
    assert pem.startswith(b"-----BEGIN PUBLIC KEY-----")
    verifier = RecordVerifier.from_pem(pem)
    assert verifier.keyid == signer.keyid
    assert verifier.open(signer.sign(STATEMENT)) == STATEMENT


def test_from_pem_refuses_other_key_types() -> None:
    pem = (
        generate_private_key(SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(BadSignature):
        RecordVerifier.from_pem(pem)


def _signer() -> Signer:
    return Signer(Ed25519PrivateKey.generate())


def _tampered_payload(env: dict[str, Any]) -> dict[str, Any]:
    env = copy.deepcopy(env)
    statement = json.loads(base64.b64decode(env["payload"]))
    statement["n"] = 2
    env["payload"] = base64.b64encode(canonical_json(statement)).decode()
    return env


def _tampered_signature(env: dict[str, Any]) -> dict[str, Any]:
    env = copy.deepcopy(env)
    sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    sig[0] ^= 1
    env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    return env


def _other_payload_type(env: dict[str, Any]) -> dict[str, Any]:
    return {**env, "payloadType": "application/json"}


def test_tampered_payload() -> None:
    s = _signer()
    with pytest.raises(BadSignature, match="does not verify"):
        s.public.open(_tampered_payload(s.sign(STATEMENT)))


def test_tampered_signature() -> None:
    s = _signer()
    with pytest.raises(BadSignature, match="does not verify"):
        s.public.open(_tampered_signature(s.sign(STATEMENT)))


def test_wrong_key() -> None:
    a, b = _signer(), _signer()
    env = a.sign(STATEMENT)
    with pytest.raises(BadSignature, match="no signature by the run's key"):
        b.public.open(env)
    # a forged keyid does not help: the signature itself is checked
    env["signatures"][0]["keyid"] = b.keyid
    with pytest.raises(BadSignature, match="does not verify"):
        b.public.open(env)


def test_wrong_payload_type() -> None:
    s = _signer()
    with pytest.raises(BadSignature, match="payload type"):
        s.public.open(_other_payload_type(s.sign(STATEMENT)))


def test_signature_over_another_payload_type_does_not_verify() -> None:
    # PAE binds the type: a signature made for another type cannot be relabelled
    s = _signer()
    payload = canonical_json(STATEMENT)
    key = Ed25519PrivateKey.generate()
    forged_signer = Signer(key)
    sig = key.sign(pae("application/json", payload))
    env = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": forged_signer.keyid, "sig": base64.b64encode(sig).decode()}],
    }
    with pytest.raises(BadSignature):
        forged_signer.public.open(env)
    with pytest.raises(BadSignature):
        s.public.open(env)


@pytest.mark.parametrize(
    "garbage",
    [
        {},
        None,
        "not an envelope",
        [],
        {"payloadType": PAYLOAD_TYPE},
        {"payloadType": PAYLOAD_TYPE, "payload": "!!!not base64!!!", "signatures": []},
        {"payloadType": PAYLOAD_TYPE, "payload": "e30=", "signatures": None},
        {"payloadType": PAYLOAD_TYPE, "payload": 5, "signatures": []},
        {"payloadType": PAYLOAD_TYPE, "payload": "e30=", "signatures": ["junk"]},
        {"payloadType": PAYLOAD_TYPE, "payload": "e30=", "signatures": [None]},
    ],
    ids=[
        "empty",
        "none",
        "string",
        "list",
        "no-payload",
        "bad-base64",
        "signatures-none",
        "payload-int",
        "signature-entry-string",
        "signature-entry-none",
    ],
)
def test_garbage_envelope(garbage: Any) -> None:
    with pytest.raises(BadSignature):
        _signer().public.open(garbage)


def test_garbage_signature_fields() -> None:
    s = _signer()
    env = s.sign(STATEMENT)
    for sig in ("", "@@@@", 12, None):
        bad = copy.deepcopy(env)
        bad["signatures"][0]["sig"] = sig
        with pytest.raises(BadSignature):
            s.public.open(bad)
    bad = copy.deepcopy(env)
    del bad["signatures"][0]["sig"]
    with pytest.raises(BadSignature):
        s.public.open(bad)


def test_signed_non_object_statement_is_refused() -> None:
    key = Ed25519PrivateKey.generate()
    s = Signer(key)
    payload = b"[1,2,3]"
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    env = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": s.keyid, "sig": base64.b64encode(sig).decode()}],
    }
    with pytest.raises(BadSignature, match="not an object"):
        s.public.open(env)


def test_one_of_several_signatures_is_ours() -> None:
    a, b = _signer(), _signer()
    env = a.sign(STATEMENT)
    env["signatures"] = [*b.sign(STATEMENT)["signatures"], *env["signatures"]]
    assert a.public.open(env) == STATEMENT
    assert b.public.open(env) == STATEMENT


def test_pae_matches_the_dsse_spec() -> None:
    # the worked example of the DSSE protocol specification
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert pae("", b"") == b"DSSEv1 0  0 "
    body = "héllo".encode()  # lengths are byte lengths
    assert pae("t", body) == b"DSSEv1 1 t 6 " + body


def test_signature_is_over_pae(keys: Path) -> None:
    signer = create_signer("r")
    env = signer.sign(STATEMENT)
    pub = serialization.load_pem_public_key(signer.public.pem())
    sig = base64.b64decode(env["signatures"][0]["sig"])
    pub.verify(sig, pae(PAYLOAD_TYPE, canonical_json(STATEMENT)))  # type: ignore[union-attr]


def test_keys_never_land_in_the_real_home(keys: Path) -> None:
    create_signer("r")
    assert os.listdir(keys) == ["r.pem"]


def test_sign_bytes_and_check_bytes() -> None:
    s = _signer()
    payload = b'{"seq":0}'
    sig = s.sign_bytes(EVENT_TYPE, payload)
    assert base64.b64decode(sig, validate=True)
    assert s.public.check_bytes(EVENT_TYPE, payload, sig)
    # bound to the payload, the payload type and the key
    assert not s.public.check_bytes(EVENT_TYPE, payload + b" ", sig)
    assert not s.public.check_bytes(PAYLOAD_TYPE, payload, sig)
    assert not _signer().public.check_bytes(EVENT_TYPE, payload, sig)
    assert EVENT_TYPE != PAYLOAD_TYPE


@pytest.mark.parametrize("sig", ["", "@@@", "AAAA", None, 5])
def test_check_bytes_on_garbage_is_false(sig: Any) -> None:
    assert _signer().public.check_bytes(EVENT_TYPE, b"x", sig) is False
