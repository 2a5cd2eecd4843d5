"""The child side of an untrusted operator: runs inside the sandbox, speaks JSON.

``python -S -m rsiframe.slots.oprunner REQUEST.json`` loads the operator class from
the candidate's tree (mounted read-only), hands it a context rebuilt from the
request, and writes one :class:`Response` to stdout. Nothing here can reach the
run: the request holds only what the slot's view allows, and reads beyond it
raise :class:`~rsiframe.api.InformationFlowError` and are reported back in the
response (the host records them). This module imports only :mod:`rsiframe.api`
(staged into the sandbox beside it) and the operator; the host imports it for
the contract models. Version :data:`SCHEMA_VERSION` of the contract.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
import traceback
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rsiframe.api import (
    SLOT_TABLE,
    Analysis,
    CandidateView,
    Context,
    InformationFlowError,
    Operator,
    Result,
    Rollout,
)

SCHEMA_VERSION: Literal[1] = 1
#: where the bubblewrap sandbox mounts the candidate tree that holds the operator's code
SOURCE_INSIDE = "/rsi/source"
#: slots a candidate's own code may fill, and the result model each returns
RESULTS: dict[str, type[Result]] = {
    name: spec.result for name, spec in SLOT_TABLE.items() if spec.candidate_code
}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CandidateInfo(_Model):
    id: str
    parent: str | None
    generation: int
    state: str
    commit: str | None
    tree: str | None
    description: str = ""
    placement: dict[str, Any] = Field(default_factory=dict)
    parents: list[str] = Field(default_factory=list)  # a merge: two
    analysis: str | None = None  # the digest of the analysis its mutation was made from
    stopped_at: str | None = None  # the evaluation stage that archived it, if one did
    mutation: str | None = None  # the digest of its mutation's report
    scores: dict[str, float | None] = Field(default_factory=dict)

    def view(self) -> CandidateView:
        return CandidateView(
            self.id,
            self.parent,
            self.generation,
            self.state,
            self.commit,
            self.tree,
            self.description,
            dict(self.placement),
            tuple(self.parents),
            self.analysis,
            self.stopped_at,
            self.mutation,
        )


class Request(_Model):
    """Everything an untrusted operator call gets: only what its slot's view allows."""

    schema_version: Literal[1] = SCHEMA_VERSION
    slot: str  # one of RESULTS (checked below)
    path: str  # the operator file, relative to the candidate tree
    source: str = SOURCE_INSIDE  # where the candidate tree is mounted (read-only)
    class_name: str
    config: dict[str, Any] = Field(default_factory=dict)
    allowed: list[str]  # reads of rsiframe.api.READS this slot may make
    generation: int
    rng_seed: int
    candidate_id: str
    parent: CandidateInfo
    candidates: list[CandidateInfo]
    lessons: str = ""
    rewards: dict[str, dict[str, dict[str, float]]] = Field(default_factory=dict)
    trajectories: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    rollout: dict[str, Any] | None = None
    analysis: dict[str, Any] | None = None
    surface_include: list[str] = Field(default_factory=list)
    surface_exclude: list[str] = Field(default_factory=list)
    changes: list[dict[str, Any]] = Field(default_factory=list)
    tree: str | None = None
    trees: list[str] = Field(default_factory=list)
    workdir: str | None = None

    @field_validator("slot")
    @classmethod
    def _candidate_slot(cls, slot: str) -> str:
        if slot not in RESULTS:
            raise ValueError(f"a candidate's own code may fill only {', '.join(RESULTS)}")
        return slot


class Violation(_Model):
    asked: str
    detail: str


class Response(_Model):
    """What the child writes to stdout; the host validates it before anything is used."""

    schema_version: Literal[1]
    ok: bool
    result: dict[str, Any] | None = None
    error: str | None = Field(None, max_length=4000)
    violations: list[Violation] = Field(default_factory=list, max_length=100)


class JsonRunView:
    """A :class:`~rsiframe.api.RunView` over the request: nothing else exists in here."""

    def __init__(self, req: Request) -> None:
        self._req = req
        self._c = {c.id: c for c in req.candidates}
        self.violations: list[Violation] = []

    def _check(self, what: str, detail: str) -> None:
        if what not in self._req.allowed:
            self.violations.append(Violation(asked=what, detail=detail))
            raise InformationFlowError(f"the {self._req.slot} operator may not read {detail}")

    @property
    def lessons(self) -> str:
        return self._req.lessons

    def candidates(self) -> list[CandidateView]:
        return [c.view() for c in self._c.values()]

    def candidate(self, cid: str) -> CandidateView:
        if cid not in self._c:
            raise KeyError(f"no candidate {cid!r}")
        return self._c[cid].view()

    def admitted(self) -> list[CandidateView]:
        return [c.view() for c in self._c.values() if c.state == "admitted"]

    def lineage(self, cid: str) -> list[CandidateView]:
        out = []
        c = self._c.get(cid)
        while c is not None:
            out.append(c.view())
            c = self._c.get(c.parent) if c.parent else None
        return out

    def score(self, cid: str, split: str) -> float | None:
        self._check(f"scores:{split}", f"{split} scores (of {cid})")
        return self._c[cid].scores.get(split) if cid in self._c else None

    def rewards(self, cid: str, split: str = "train") -> dict[str, float] | None:
        self._check(f"rewards:{split}", f"per-task {split} rewards (of {cid})")
        return self._req.rewards.get(split, {}).get(cid)

    def trajectories(self, cid: str, split: str = "train") -> list[dict[str, Any]]:
        self._check(f"trajectories:{split}", f"{split} trajectories (of {cid})")
        return self._req.trajectories.get(cid, [])

    def artifact(self, digest: str) -> bytes:
        raise KeyError("artifacts are not available to untrusted operators")

    def read_file(self, cid: str, path: str) -> bytes:
        if cid != self._req.parent.id:
            raise KeyError("untrusted operators read files of their own candidate only")
        root = Path(self._req.source).resolve()
        target = (root / path).resolve()
        if root not in target.parents:
            raise KeyError(f"{path} is outside the candidate tree")
        return target.read_bytes()

    def trees(self) -> set[str]:
        return set(self._req.trees)


def _load(req: Request) -> type[Operator]:
    path = Path(req.source) / req.path
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("rsiframe_candidate_operator", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {req.path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cls = getattr(module, req.class_name, None)
    base = SLOT_TABLE[req.slot].base
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{req.path}:{req.class_name} is not a {req.slot} operator")
    return cls


def _context(req: Request, view: JsonRunView) -> Context:
    """The slot's context (``SLOT_TABLE[slot].context``), each field from the request."""
    values: dict[str, Any] = {
        "run": view,
        "rng": random.Random(req.rng_seed),
        "generation": req.generation,
        "candidate_id": req.candidate_id,
        "parent": req.parent.view(),
        "workdir": Path(req.workdir) if req.workdir is not None else None,
        "rollout": Rollout.model_validate(req.rollout) if req.rollout is not None else None,
        "analysis": Analysis.model_validate(req.analysis) if req.analysis else None,
        "lessons": req.lessons,
        "surface_include": tuple(req.surface_include),
        "surface_exclude": tuple(req.surface_exclude),
        "changes": req.changes,
        "tree": req.tree,
    }
    context = SLOT_TABLE[req.slot].context
    given = {f.name: values[f.name] for f in fields(context) if f.name in values}
    required = [
        f.name for f in fields(context) if f.default is MISSING and f.default_factory is MISSING
    ]
    missing = [n for n in required if given.get(n) is None and n != "analysis"]
    if missing:
        raise ValueError(f"the request lacks what a {req.slot} context needs: {missing}")
    return context(**given)


def _call(req: Request, view: JsonRunView) -> Result:
    cls = _load(req)
    op = cls(cls.Config.model_validate(req.config))
    result: Result = getattr(op, SLOT_TABLE[req.slot].method)(_context(req, view))
    return result


def main(argv: list[str]) -> int:
    # the response owns stdout; whatever the operator prints goes to stderr
    response_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    violations: list[Violation] = []
    try:
        req = Request.model_validate_json(Path(argv[0]).read_bytes())
        view = JsonRunView(req)
        try:
            result = _call(req, view)
        finally:
            violations = view.violations
        resp = Response(
            schema_version=SCHEMA_VERSION,
            ok=True,
            result=result.model_dump(mode="json"),
            violations=violations,
        )
        code = 0
    except Exception as exc:
        traceback.print_exc()
        error = f"{type(exc).__name__}: {exc}"[:4000]
        resp = Response(schema_version=SCHEMA_VERSION, ok=False, error=error, violations=violations)
        code = 1
    with os.fdopen(response_fd, "w") as out:
        out.write(json.dumps(resp.model_dump(mode="json")))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
