"""A signed snapshot of the folded run state, so resume need not refold every event.

``state.snapshot`` in the run folder holds the :class:`~rsiframe.archive.state.RunState`
folded from events ``0..seq`` together with that event's chain hash, the byte
range of its line in ``events.jsonl`` and the sha256 of every byte before the
line's end (``prefix``). Its first line is a header naming the
signature (by the run's key, over the rest of the file, under its own payload
type so no event or record signature can stand in for it); the rest is the body.

:func:`load_snapshot` trusts a snapshot only when the signature verifies, it
names this run, the archive's bytes up to it are still the ones it hashed (one
sha256 over the prefix: an edited, inserted or removed line before it changes it,
at a fifth of the cost of checking each line's chain link), and the line it
names is still, byte for byte, event ``seq`` with that hash. The archive is
append-only, so a snapshot stays valid as the run grows: resume folds only the
events after it. Anything that does not match returns ``None`` with the reason,
and the caller folds everything instead.
``verify`` never reads a snapshot.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pydantic_core
from pydantic import BaseModel

from rsiframe.archive.log import EVENTS, Event, parse_line, write_atomic
from rsiframe.archive.state import Attempt, Candidate, RunState
from rsiframe.certs.records import CertifiedRecord, EvaluationPredicate
from rsiframe.certs.signing import RecordVerifier, Signer
from rsiframe.util.digest import canonical_json, sha256_bytes

M = TypeVar("M", bound=BaseModel)
SNAPSHOT = "state.snapshot"
SNAPSHOT_TYPE = "application/vnd.rsiframe.state-snapshot+json"
#: 2: the prefix digest; 3: each attempt's model tokens and the served model's usage (an
#: older snapshot lacks them, so it is refolded rather than read as zero)
FORMAT = 3


@dataclass(frozen=True)
class Snapshot:
    state: RunState
    head: Event  # the last event the state has folded
    end: int  # byte offset just after its line: the next event starts here


# -- encoding: every dataclass field, so fields added to the state travel too ---------


def _int_keyed(f: dataclasses.Field[Any]) -> bool:
    return str(f.type).replace(" ", "").startswith(("dict[int,", "dict[int|"))


def _enc_attempt(a: Attempt) -> dict[str, Any]:
    out = {f.name: getattr(a, f.name) for f in dataclasses.fields(a)}
    out["record"] = a.record.model_dump(mode="json") if a.record is not None else None
    return out


def _enc_candidate(c: Candidate) -> dict[str, Any]:
    out = {f.name: getattr(c, f.name) for f in dataclasses.fields(c)}
    out["attempts"] = {s: [_enc_attempt(a) for a in tries] for s, tries in c.attempts.items()}
    return out


def encode_state(st: RunState) -> dict[str, Any]:
    """The state as JSON-ready data (everything but the verifier and the indexes)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(st):
        if f.name == "verifier" or f.name in RunState.INDEXES:
            continue
        value = getattr(st, f.name)
        if f.name == "candidates":
            value = [_enc_candidate(c) for c in value.values()]
        elif _int_keyed(f):
            value = [[k, v] for k, v in value.items()]
        out[f.name] = value
    return out


def decode_state(data: dict[str, Any], verifier: RecordVerifier) -> RunState:
    st = RunState(verifier=verifier)
    names = {f.name: f for f in dataclasses.fields(st)}
    if set(data) != set(names) - {"verifier", *RunState.INDEXES}:
        raise ValueError("the snapshot's fields are not this version's")
    for name, value in data.items():
        f = names[name]
        if name == "candidates":
            value = {c["id"]: _dec_candidate(c) for c in value}
        elif _int_keyed(f):
            value = {int(k): v for k, v in value}
        setattr(st, name, value)
    st.reindex()
    return st


def _dec_candidate(d: dict[str, Any]) -> Candidate:
    d = dict(d)
    d["attempts"] = {s: [_dec_attempt(a) for a in tries] for s, tries in d["attempts"].items()}
    d["splits"] = tuple(d.get("splits", ()))  # JSON has no tuples
    return Candidate(**d)


def _dec_attempt(d: dict[str, Any]) -> Attempt:
    d = dict(d)
    rec = d["record"]
    if rec is not None:
        # not revalidated: the snapshot is signed by the run's key, and each record in it was
        # dumped from a record that was validated when its certificate was checked
        pred = _construct(EvaluationPredicate, rec["predicate"])
        d["record"] = _construct(
            CertifiedRecord, {"commit": rec["commit"], "tree": rec["tree"], "predicate": pred}
        )
    return Attempt(**d)


@functools.cache
def _field_names(cls: type[BaseModel]) -> frozenset[str]:
    return frozenset(cls.model_fields)


def _construct(cls: type[M], values: dict[str, Any]) -> M:
    """``cls.model_construct(**values)`` for a complete dump, at a tenth of the cost."""
    if values.keys() != _field_names(cls):
        raise ValueError(f"a {cls.__name__} in the snapshot has other fields")
    obj = cls.__new__(cls)
    object.__setattr__(obj, "__dict__", values)
    object.__setattr__(obj, "__pydantic_fields_set__", set(values))
    object.__setattr__(obj, "__pydantic_extra__", None)
    object.__setattr__(obj, "__pydantic_private__", None)
    return obj


# -- the file ----------------------------------------------------------------------


def _last_line(path: Path) -> tuple[int, int, bytes]:
    """(start, end, bytes) of the last complete line of ``path``."""
    with path.open("rb") as f:
        end = f.seek(0, 2)
        block = 1 << 16
        buf = b""
        pos = end
        while pos > 0:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            buf = f.read(step) + buf
            last_nl = buf.rfind(b"\n")
            if last_nl < 0:
                continue
            prev_nl = buf.rfind(b"\n", 0, last_nl)
            if prev_nl >= 0 or pos == 0:
                start = pos + prev_nl + 1
                line_end = pos + last_nl
                return start, line_end + 1, buf[prev_nl + 1 : last_nl]
            block *= 2
    raise ValueError("no complete event")


def save_snapshot(run_dir: Path, st: RunState, signer: Signer) -> None:
    """Write a snapshot of ``st``, which must be the fold of every event in the archive.

    Best effort: a snapshot that cannot be written only makes the next resume slower.
    """
    if st.problems:
        return  # only a clean fold is worth resuming from
    try:
        _save(run_dir, st, signer)
    except (OSError, ValueError):
        return


def _save(run_dir: Path, st: RunState, signer: Signer) -> None:
    start, end, line = _last_line(run_dir / EVENTS)
    head = parse_line(line, f"{run_dir / EVENTS}: last event")
    if head.ts != st.last_ts:
        return  # the state is not the fold of exactly these events
    with (run_dir / EVENTS).open("rb") as f:
        prefix = sha256_bytes(f.read(end))
    body = canonical_json(
        {
            "format": FORMAT,
            "run_id": st.run_id,
            "seq": head.seq,
            "hash": head.hash,
            "start": start,
            "end": end,
            "prefix": prefix,
            "state": encode_state(st),
        }
    )
    header = canonical_json({"sig": signer.sign_bytes(SNAPSHOT_TYPE, body)})
    write_atomic(run_dir / SNAPSHOT, header + b"\n" + body, durable=False)


def load_snapshot(run_dir: Path, verifier: RecordVerifier) -> tuple[Snapshot | None, str]:
    """The run's snapshot if it verifies and still matches the archive, else (None, why)."""
    enabled = gc.isenabled()
    gc.disable()  # hundreds of thousands of new objects, none garbage: collections would
    try:  # rescan them all again and again (seconds at 10,000 candidates)
        return _load(run_dir, verifier)
    finally:
        if gc.get_freeze_count() == 0:
            # and then straight into the oldest generation (freeze, unfreeze: two list
            # splices), or the next young collections traverse all of it once more
            # (0.1 s of CPU at 10,000 candidates)
            gc.freeze()
            gc.unfreeze()
        if enabled:
            gc.enable()


def _load(run_dir: Path, verifier: RecordVerifier) -> tuple[Snapshot | None, str]:
    try:
        raw = (run_dir / SNAPSHOT).read_bytes()
    except FileNotFoundError:
        return None, "no snapshot"
    header, _, body = raw.partition(b"\n")
    try:
        sig = json.loads(header)["sig"]
        if not verifier.check_bytes(SNAPSHOT_TYPE, body, sig):
            return None, "the snapshot's signature does not verify"
        data = pydantic_core.from_json(body)  # a few times faster than json on megabytes
        if data["format"] != FORMAT:
            return None, "the snapshot is of another format"
        start, end = int(data["start"]), int(data["end"])
        with (run_dir / EVENTS).open("rb") as f:
            before = f.read(end)
        line = before[start:]
        if end <= start or len(before) < end or not line.endswith(b"\n"):
            return None, "the archive is shorter than the snapshot"
        if sha256_bytes(before) != data["prefix"]:  # the full fold names what changed
            return None, "the archive before it changed"
        # bytes first: a line moved or edited since is no event to parse (edits are
        # reported by the full fold that follows, with the archive's own messages)
        if sha256_bytes(line[:-1]) != data["hash"]:
            return None, "the snapshot does not match the archive's event"
        head = parse_line(line[:-1], f"{run_dir / EVENTS}: event {data['seq']}")
        if head.seq != data["seq"] or head.hash != data["hash"]:
            return None, "the snapshot does not match the archive's event"
        st = decode_state(data["state"], verifier)
        if st.run_id != data["run_id"]:
            return None, "the snapshot names another run"
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"the snapshot is unreadable ({exc})"
    return Snapshot(st, head, end), ""
