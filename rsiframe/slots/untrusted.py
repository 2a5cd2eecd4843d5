"""Untrusted operators: code from a candidate's own tree, run out of process in the sandbox.

A recipe slot names one with ``operator: "candidate:PATH:Class"``, where PATH
is a ``.py`` file relative to the candidate tree (e.g.
``candidate:ops/mutate.py:MyMutator``). For each call the code comes from the
committed tree of the candidate the call is about (the parent of the child
being made), exported and checked against its tree hash, and runs in the
sandbox of :mod:`rsiframe.sandbox.bwrap` (bubblewrap unless ``sandbox: auto`` or
``process``) with ``python -S -m rsiframe.slots.oprunner``: it sees the Python
installation, staged copies of ``rsiframe/api.py``, ``surface.py`` and the runner, its own
tree (read-only), the request and, for ``mutate``, the work folder. Framework
and operator talk only through the versioned JSON contract of
:mod:`rsiframe.slots.oprunner`: the request holds only what the slot's view allows;
the response is size-capped and validated (schema, types, the slot's result
model) before use. A malformed, oversized, crashing or hanging operator raises
:class:`UntrustedOperatorError`, which rejects the child with the reason.

Only ``analyze``, ``mutate``, ``validate`` and ``novelty`` take candidate code:
``select`` runs before there is a parent, ``rollout`` hands out a runner, and a
candidate never decides its own ``gate`` or writes its own ``record``.

The slot's config holds the sandbox options, ``timeout_s``,
``max_result_bytes``, ``config``, the operator's own config (validated
inside the child against its ``Config``), and ``model``: a model of the recipe's
``models:`` the operator may call. It gets the run's gateway the way a coding agent does
(a forwarder in the sandbox at ``$OPENAI_BASE_URL``, ``$OPENAI_API_KEY`` a token of its
own, ``$RSI_MODEL`` the model's name): the token is bound to that one model and every call
is metered to the candidate and the slot, like a built-in operator's. So the candidate's
own agent can be its mutator (DGM, HyperAgents) and pay for its model calls in the budget.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any, ClassVar

from pydantic import Field, ValidationError

from rsiframe import api, llm, surface
from rsiframe.api import READS, SLOT_BASES, SLOT_TABLE, Operator, Result, SandboxUse, may_read
from rsiframe.errors import OperatorNotFound
from rsiframe.sandbox.bwrap import Mount, SandboxOptions, make_sandbox
from rsiframe.sandbox.mounts import INPUTS_INSIDE, LIB_INSIDE, WORK_INSIDE
from rsiframe.slots import oprunner
from rsiframe.slots.oprunner import RESULTS, SCHEMA_VERSION, CandidateInfo, Request, Response
from rsiframe.util.validation import clean

PREFIX = "candidate:"
UNTRUSTED_SLOTS = tuple(RESULTS)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class UntrustedConfig(SandboxOptions):
    """Config of a ``candidate:`` slot: the sandbox, limits, and the operator's own config."""

    timeout_s: float = Field(600.0, gt=0)
    memory_mb: int | None = Field(2048, gt=0, description="address-space limit per process")
    max_result_bytes: int = Field(
        1 << 20, gt=0, le=64 << 20, description="largest JSON response accepted"
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="the operator's own config, checked in the child"
    )
    model: str | None = Field(
        None,
        description="a model of the recipe's models: the operator may call through the "
        "run's gateway ($OPENAI_BASE_URL), metered to its candidate and slot",
    )


class UntrustedOperatorError(Exception):
    """An untrusted operator crashed, hung or returned something unusable."""


@dataclass(frozen=True)
class CandidateRef:
    path: str
    class_name: str

    def __str__(self) -> str:
        return f"{PREFIX}{self.path}:{self.class_name}"


def parse_ref(slot: str, ref: str) -> CandidateRef:
    """``candidate:PATH:Class`` checked: a relative ``.py`` path, a class name, an allowed slot."""
    body = ref.removeprefix(PREFIX)
    path, _, name = body.rpartition(":")
    p = PurePosixPath(path)
    if not path or not name or not _IDENT.match(name):
        raise OperatorNotFound(f"{ref!r} is not candidate:PATH.py:Class")
    if p.is_absolute() or ".." in p.parts or p.suffix != ".py":
        raise OperatorNotFound(f"{ref!r}: PATH must be a .py file inside the candidate tree")
    if slot not in UNTRUSTED_SLOTS:
        raise OperatorNotFound(
            f"a candidate's own code may fill only {', '.join(UNTRUSTED_SLOTS)}, not {slot}"
        )
    return CandidateRef(str(p), name)


class UntrustedOperator(Operator):
    """Host side of a ``candidate:`` operator; :func:`operator_class` makes one per slot."""

    ref: ClassVar[CandidateRef]
    Config = UntrustedConfig
    config: UntrustedConfig

    def __init__(
        self, config: UntrustedConfig, sources: Callable[[str], Path] | None = None
    ) -> None:
        """``sources``: a candidate id -> the verified export of its committed tree, where
        the operator's code is read from (the engine gives it)."""
        super().__init__(config)
        self.sources = sources

    def call(self, ctx: Any) -> Result:
        if self.sources is None:
            raise UntrustedOperatorError("no candidate trees are bound to this operator")
        cfg = self.config
        sb = make_sandbox(cfg.sandbox)
        with tempfile.TemporaryDirectory(prefix="rsiframe-untrusted-") as tmp:
            t = Path(tmp)
            stage_modules(t / "lib", (api, surface, oprunner))
            (t / "in").mkdir()
            m_lib = Mount(t / "lib", LIB_INSIDE)
            m_in = Mount(t / "in", INPUTS_INSIDE)
            m_src = Mount(self.sources(ctx.parent.id), oprunner.SOURCE_INSIDE)
            mounts = [m_lib, m_in, m_src]
            cwd = m_in
            workdir = getattr(ctx, "workdir", None)
            if workdir is not None:
                cwd = Mount(Path(workdir), WORK_INSIDE, writable=SLOT_TABLE[self.slot].writes_work)
                mounts.append(cwd)
            req = build_request(self.slot, ctx, self.ref, cfg.config)
            req.source = sb.view(m_src)
            req.workdir = sb.view(cwd) if workdir is not None else None
            (t / "in" / "request.json").write_text(req.model_dump_json())
            env = cfg.host_env()
            env["PYTHONPATH"] = ":".join([sb.view(m_lib), *_site_packages()])
            runner = f"{sb.view(m_in)}/request.json"
            argv = [sys.executable, "-S", "-m", "rsiframe.slots.oprunner", runner]
            argv = self._with_model(sb, argv, mounts, env)
            res = sb.run(
                argv,
                mounts=mounts,
                cwd=cwd,
                env=env,
                timeout=cfg.timeout_s,
                network=bool(cfg.network.allow),
                output_limit=cfg.max_result_bytes + 1,
                memory_mb=cfg.memory_mb,
                output_cap=max(cfg.output_cap_bytes, cfg.max_result_bytes + 1),
            )
        use = SandboxUse(**cfg.use_fields(sb.isolation, cfg.timeout_s))
        return self._accept(ctx, res, use)

    def _with_model(
        self, sb: Any, argv: list[str], mounts: list[Mount], env: dict[str, str]
    ) -> list[str]:
        """With ``model``: ``argv`` behind the gateway's in-sandbox forwarder, its mounts
        and environment added; the endpoint is the operator call's own (bound to the model,
        metered to the candidate and slot, revoked when the call ends)."""
        model = self.config.model
        if model is None:
            return argv
        endpoint = llm.sandbox_endpoints()(f"candidate:{self.ref.path}", model=model)
        wrapped, extra, model_env = endpoint.harness(sb, argv)
        mounts.extend(extra)
        env.update(model_env)
        return list(wrapped)

    def _accept(self, ctx: Any, res: Any, use: SandboxUse) -> Result:
        where = f"{self.ref} [{use.isolation}]"
        resp = self._response(res, where)
        record = getattr(ctx.run, "record_violation", None)
        for v in resp.violations:
            if record is not None:
                record(v.asked, f"{v.detail} (reported by the sandboxed operator)")
        if not resp.ok or res.exit_code != 0:
            raise UntrustedOperatorError(f"{where} failed: {resp.error or res.exit_code}")
        try:
            result = RESULTS[self.slot].model_validate(resp.result)
        except ValidationError as exc:
            raise UntrustedOperatorError(
                f"{where} returned a malformed result: {_first(exc)}"
            ) from None
        if hasattr(result, "sandbox"):
            result.sandbox = use
        return result

    def _response(self, res: Any, where: str) -> Response:
        """The child's response, if it ended in time, within its caps, with one."""
        cfg = self.config
        if res.timed_out:
            raise UntrustedOperatorError(f"{where} timed out after {cfg.timeout_s:g}s")
        if res.output_exceeded:
            raise UntrustedOperatorError(f"{where} wrote more than {cfg.output_cap_bytes} bytes")
        if len(res.stdout) > cfg.max_result_bytes:
            raise UntrustedOperatorError(
                f"{where} returned a result larger than {cfg.max_result_bytes} bytes"
            )
        if not res.stdout.strip():
            raise UntrustedOperatorError(
                f"{where} exited with {res.exit_code} without a result: {_tail(res.stderr)}"
            )
        try:
            return Response.model_validate_json(res.stdout)
        except ValidationError as exc:
            raise UntrustedOperatorError(
                f"{where} returned a malformed response: {_first(exc)}"
            ) from None


def build_request(slot: str, ctx: Any, ref: CandidateRef, config: dict[str, Any]) -> Request:
    """The JSON request for one call: only what ``ctx.run`` lets this slot read."""
    view = ctx.run
    may = getattr(view, "may", None)
    allowed = [w for w in READS if (may(w) if may is not None else may_read(slot, w))]
    candidates = []
    for c in view.candidates():
        scores = {s: view.score(c.id, s) for s in ("train", "gate") if f"scores:{s}" in allowed}
        candidates.append(CandidateInfo(**asdict(c), scores=scores))
    parent = ctx.parent
    rewards: dict[str, dict[str, dict[str, float]]] = {}
    for split in ("train", "gate"):
        if f"rewards:{split}" in allowed:
            r = view.rewards(parent.id, split)
            if r is not None:
                rewards[split] = {parent.id: r}
    trajectories = {}
    needs = {f.name for f in fields(SLOT_TABLE[slot].context)}
    if "trajectories:train" in allowed and "rollout" in needs:  # analyze, mutate
        trajectories[parent.id] = view.trajectories(parent.id)
    rollout = getattr(ctx, "rollout", None)
    analysis = getattr(ctx, "analysis", None)
    return Request(
        schema_version=SCHEMA_VERSION,
        slot=slot,
        path=ref.path,
        class_name=ref.class_name,
        config=config,
        allowed=allowed,
        generation=ctx.generation,
        rng_seed=ctx.rng.randrange(2**31),
        candidate_id=getattr(ctx, "candidate_id", parent.id),
        parent=next(c for c in candidates if c.id == parent.id),
        candidates=candidates,
        lessons=getattr(ctx, "lessons", "") if "lessons" in allowed else "",
        rewards=rewards,
        trajectories=trajectories,
        rollout=rollout.model_dump(mode="json") if rollout is not None else None,
        analysis=analysis.model_dump(mode="json") if analysis is not None else None,
        surface_include=list(getattr(ctx, "surface_include", ())),
        surface_exclude=list(getattr(ctx, "surface_exclude", ())),
        changes=list(getattr(ctx, "changes", [])),
        tree=getattr(ctx, "tree", None),
        trees=sorted(view.trees()) if "tree" in needs else [],
    )


def make_operator(cls: type[Operator], config: Any, sources: Callable[[str], Path]) -> Operator:
    """An operator instance; one from a candidate's tree also gets ``sources`` (a candidate
    id -> its verified export), where its code is read from."""
    if issubclass(cls, UntrustedOperator):
        return cls(config, sources)
    return cls(config)


def operator_class(slot: str, ref: str) -> type[Operator]:
    """A host-side operator class for ``candidate:PATH:Class`` in ``slot``."""
    parsed = parse_ref(slot, ref)

    def method(self: UntrustedOperator, ctx: Any) -> Result:
        return self.call(ctx)

    base = SLOT_BASES[slot]
    return type(
        f"Untrusted{slot.title()}",
        (UntrustedOperator, base),
        {"slot": slot, "name": str(parsed), "ref": parsed, slot: method, "__doc__": __doc__},
    )


def stage_modules(lib: Path, modules: tuple[ModuleType, ...]) -> None:
    """Copy ``modules`` under ``lib`` at their package paths (``rsiframe/slots/oprunner.py``),
    each package with an empty ``__init__.py``: the sandbox imports them and nothing else."""
    for mod in modules:
        *packages, leaf = mod.__name__.split(".")
        folder = lib.joinpath(*packages)
        folder.mkdir(parents=True, exist_ok=True)
        for depth in range(1, len(packages) + 1):
            (lib.joinpath(*packages[:depth]) / "__init__.py").touch()
        shutil.copyfile(str(mod.__file__), folder / f"{leaf}.py")


def _site_packages() -> list[str]:
    return [p for p in sys.path if p.rstrip("/").endswith("site-packages") and Path(p).is_dir()]


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(root)"
    more = len(exc.errors()) - 1
    return f"{loc}: {clean(err['msg'])}" + (f" (and {more} more)" if more else "")


def _tail(data: bytes, limit: int = 500) -> str:
    return data.decode(errors="replace").strip()[-limit:]


__all__ = ["PREFIX", "UntrustedConfig", "UntrustedOperator", "UntrustedOperatorError"]
