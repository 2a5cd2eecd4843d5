"""The model gateway: one framework-owned, metered OpenAI-compatible endpoint per run.

Every consumer (an operator in the engine process, a coding agent in the mutation
sandbox, a candidate's agent at evaluation) calls the gateway, never a provider. The
gateway

- speaks ``POST /v1/chat/completions`` and ``/v1/completions`` (streaming included),
  ``/v1/embeddings`` (no output tokens: a call reserves and is charged its input; the
  same request is the same answer, so a repeat is served from the ledger),
  ``GET /v1/models``, and passes ``/v1/responses`` (OpenAI Responses) and ``/v1/messages``
  (Anthropic Messages) through to a declared model whose ``api`` speaks them;
- authenticates each consumer by its own token (``Authorization: Bearer`` or
  ``x-api-key``), minted by :meth:`Gateway.consumer`; the provider's key is read from the
  gateway's environment and never leaves this process;
- forwards with kept connections per model (``max_concurrency`` of them, ``timeout_s``,
  ``retries`` on 429/5xx/timeouts, the declared ``model`` name substituted for the
  recipe's name): a whole answer through an ``httpcore`` pool (the bytes, no client
  layers: half the gateway's CPU per call went to httpx's URL, cookie and redirect
  handling), a stream through an ``httpx.AsyncClient``;
- binds each token to the model(s) its consumer was given: a call naming another model is
  refused (403 ``model_not_allowed``) and recorded;
- reserves tokens and cost *before* forwarding (prompt estimate + every output choice the
  request may produce: :mod:`rsiframe.gateway.bounds`) against ``max_model_tokens`` /
  ``max_cost`` and a consumer's allowance, and answers 429 ``budget_exhausted`` past any;
  a malformed output limit is refused (400 ``invalid_limit``), a missing one is added to
  the forwarded body, and a call is charged at most the output it reserved;
- meters every call from its own reading of the provider's usage (an estimate when the
  provider sends none) into an append-only, fsynced ledger (:class:`Ledger`), with the
  request and response stored content-addressed beside it, *before* the answer goes back;
- serves a request whose digest (model, path, body without transport fields, and for a
  sampled call a nonce from candidate, slot and the call's index) is already in the
  ledger from that recorded evidence, at zero cost (resume, replay).

Sandboxes reach it through a Unix socket in a folder of their own (:meth:`Gateway.
sandbox_endpoint`), mounted into the no-network sandbox behind ``serving.py forward``.

    python -m rsiframe.gateway.app --recipe R.yaml --state DIR --port 8790

Engine wiring (to come; nothing in the engine uses this module yet): the engine starts one
``Gateway(recipe.models, Ledger(run/model-calls, on_record=...), limits=Limits(budget.
max_model_tokens, budget.max_cost))`` per run (the ledger, reopened on resume, holds what
was spent and what is cached); wraps each operator call
in ``llm.use(gw.client(f"{slot}:{cid}", candidate=cid, slot=slot), endpoints=partial(
gw.sandbox_endpoint, candidate=cid, slot=slot))``; turns each ledger :class:`Entry` into a
``model_call`` event and its evidence into artifacts (``on_record``); maps a 429
``budget_exhausted`` to ``budget_exhausted``; gives an evaluation's harness
``gw.sandbox_endpoint(...).harness(sb, argv)``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpcore
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rsiframe.archive.events import UPSTREAM
from rsiframe.errors import RsiError
from rsiframe.gateway.bounds import LimitRefused, ModelUsage, OutputBound, output_bound
from rsiframe.gateway.bounds import charge as cap_charge
from rsiframe.gateway.ledger import Entry, Ledger
from rsiframe.recipe.models import ModelSpec, ResolvedModel
from rsiframe.util.digest import sha256_json

#: request body keys that change how an answer travels, not what it is (left out of digests)
TRANSPORT_KEYS = ("stream_options", "user", "metadata")
#: paths the gateway forwards, and the wire protocol each needs upstream
PATHS = {
    "/v1/chat/completions": "openai",
    "/v1/completions": "openai",
    "/v1/responses": "openai",
    "/v1/messages": "anthropic",
    "/v1/embeddings": "openai",
}
#: the embeddings path: input only, never streamed, never sampled
EMBEDDINGS = "/v1/embeddings"
MAX_BODY = 16 << 20
NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
#: the response header that says what the gateway added to the forwarded body
LIMITS_HEADER = "X-Rsiframe-Limits"


def prompt_text(path: str, body: Mapping[str, Any]) -> str:
    """Every piece of prompt text in a request body, joined (for estimates)."""
    if path.endswith("/completions") and "messages" not in body:
        p = body.get("prompt", "")
        return "\n".join(map(str, p)) if isinstance(p, list) else str(p)
    parts: list[str] = []
    for key in ("system", "instructions"):
        if isinstance(body.get(key), str):
            parts.append(body[key])
    msgs = body.get("messages", body.get("input", []))
    if isinstance(msgs, str):
        msgs = [{"content": msgs}]
    for m in msgs if isinstance(msgs, list) else []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [str(c.get("text", "")) for c in content if isinstance(c, dict)]
    return "\n".join(parts)


def embedding_inputs(body: Any) -> list[str] | None:
    """An embeddings request's texts (its ``input``: a string or a non-empty list of
    strings), or None for anything else (token-id inputs included: refused, since their
    cost could not be estimated before they are sent)."""
    value = body.get("input") if isinstance(body, dict) else None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def prompt_estimate(path: str, body: Mapping[str, Any]) -> int:
    """The prompt tokens a call is reserved for: each embedding input counted apart (as a
    provider bills them), any other call's prompt text as a whole."""
    if path == EMBEDDINGS:
        return sum(estimate_tokens(t) for t in embedding_inputs(body) or [""])
    return estimate_tokens(prompt_text(path, body))


def estimate_tokens(text: str) -> int:
    """A conservative-enough count for reservations and providers that report none."""
    return max(1, -(-len(text) // 4))


def is_sampled(body: Mapping[str, Any]) -> bool:
    """A call whose answer may differ between two identical requests (temperature > 0)."""
    t = body.get("temperature", 1.0)
    return not (isinstance(t, int | float) and t == 0)


# -- consumers, limits, ledger ---------------------------------------------------------


@dataclass
class Allowance:
    """Tokens one operation may spend in all (``max_tokens_per_mutation``), shared by every
    token minted for that operation."""

    limit: int
    spent: int = 0
    reserved: int = 0


@dataclass
class Consumer:
    """Who is calling: an operator (``slot``) or a sandbox, for one candidate."""

    name: str
    token: str
    candidate: str | None = None
    slot: str | None = None
    models: frozenset[str] | None = None  # the models it was given; None: every one
    calls: int = 0  # sampled calls so far (the nonce's index)
    #: the (candidate, consumer name) whose sampled calls this one repeats: its requests get
    #: that consumer's digests, so answers recorded for it are served from the ledger
    draws: tuple[str, str] | None = None
    allowance: Allowance | None = None
    usage: ModelUsage = field(default_factory=ModelUsage)  # what it called, per model
    #: it may spend the tokens held for the champion's sealed evaluation (:attr:`Gateway.held`)
    anchor: bool = False


@dataclass(frozen=True)
class Limits:
    """The run's budget keys the gateway enforces; None is unlimited."""

    max_model_tokens: int | None = None
    max_cost: float | None = None


# -- the gateway -----------------------------------------------------------------------


class GatewayError(Exception):
    def __init__(self, status: int, message: str, kind: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.kind, "code": self.code}}
        return JSONResponse(body, self.status)


#: what an upstream that cannot be reached or spoken to raises in the httpcore pool
_UNREACHABLE = (
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    httpcore.ProxyError,
    OSError,
)


@dataclass
class _Upstream:
    resolved: ResolvedModel
    client: httpx.AsyncClient  # streams
    pool: httpcore.AsyncConnectionPool  # whole answers
    gate: asyncio.Semaphore

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """POST ``body`` as JSON; the status and the whole answer."""
        t = self.resolved.spec.timeout_s
        headers = [(b"Content-Type", b"application/json"), (b"Accept", b"application/json")]
        headers += [(k.encode(), v.encode()) for k, v in _auth(self.resolved).items()]
        r = await self.pool.request(
            "POST",
            self.resolved.base_url + path.removeprefix("/v1"),
            headers=headers,
            content=json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(),
            extensions={"timeout": {"connect": t, "read": t, "write": t, "pool": t}},
        )
        return r.status, r.content

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.pool.aclose()


@dataclass
class _Reservation:
    tokens: int
    cost: float
    consumer: Consumer | None = None
    output: int = 0  # the output tokens reserved: what a call is charged for at most

    def charge(self, entry: Entry) -> None:
        """Count a metered call against its consumer's allowance."""
        pool = self.consumer.allowance if self.consumer is not None else None
        if pool is not None:
            pool.spent += entry.prompt_tokens + entry.completion_tokens


@dataclass
class SandboxEndpoint:
    """A sandbox's way in: a folder holding the socket (mount it) and its token."""

    name: str
    folder: Path
    token: str
    model: str  # the default model name for the harness ($RSI_MODEL)

    def harness(self, sb: Any, argv: list[str]) -> tuple[list[str], list[Any], dict[str, str]]:
        """``argv`` behind the in-sandbox forwarder of ``serving.py`` (reused as is), its
        mounts, and the environment: ``OPENAI_API_KEY`` is this sandbox's token only."""
        from rsiframe.dth.serving import OpenEndpoint

        wrapped, mounts, env = OpenEndpoint(self.name, self.model, self.folder).harness(sb, argv)
        return wrapped, mounts, {**env, "OPENAI_API_KEY": self.token}


class Gateway:
    """The gateway's state and ASGI app; :meth:`start` serves it from a background thread."""

    def __init__(
        self,
        models: Mapping[str, ModelSpec],
        ledger: Ledger,
        *,
        limits: Limits = Limits(),
        environ: Mapping[str, str] | None = None,
        retry_backoff_s: float = 0.5,
        socket_root: Path | None = None,
        archive: Ledger | None = None,
    ) -> None:
        self.specs = dict(models)
        #: a replay's gateway answers only from this (the source run's) ledger, never a provider
        self.archive = archive
        #: endpoints and keys; a model whose variables are unset is refused when called
        self.resolved: dict[str, ResolvedModel] = {}
        self.unresolved: dict[str, str] = {}
        for name, spec in self.specs.items() if archive is None else ():
            try:
                self.resolved[name] = spec.resolve(environ)
            except RsiError as exc:
                self.unresolved[name] = str(exc)
        self.ledger = ledger
        self.limits = limits
        self.backoff = retry_backoff_s
        # AF_UNIX paths are limited to 107 bytes: sockets live under a short temp folder
        self.socket_root = Path(socket_root or tempfile.mkdtemp(prefix="rsigw-"))
        self.consumers: dict[str, Consumer] = {}
        self._reserved = _Reservation(0, 0.0)
        self._sandboxes: dict[str, Any] = {}  # token -> the server of its socket
        #: tokens and cost the run spent outside this gateway (an evaluation's served model)
        self.elsewhere = (0, 0.0)
        #: of ``max_model_tokens``, the tokens only an ``anchor`` consumer may spend (the
        #: champion's sealed evaluation; the engine sizes it from its evaluations' calls)
        self.held = 0
        self._lock = threading.Lock()
        self._upstreams: dict[str, _Upstream] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[Any] = []
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        self.app = Starlette(
            routes=[
                Route("/v1/models", self._models, methods=["GET"]),
                *(Route(p, self._forward, methods=["POST"]) for p in PATHS),
            ]
        )

    # -- consumers ----------------------------------------------------------------------

    def consumer(
        self,
        name: str,
        *,
        candidate: str | None = None,
        slot: str | None = None,
        models: list[str] | None = None,
        allowance: int | None = None,
        share: str | None = None,
        draws: tuple[str, str] | None = None,
        anchor: bool = False,
    ) -> Consumer:
        """Mint a token for one consumer (an operator call or a sandbox), bound to
        ``models`` (None: every declared model); ``allowance`` caps the tokens it may
        spend in all (``max_tokens_per_mutation``), shared with the consumer whose token is
        ``share`` (one operation's tokens draw on one allowance); ``draws``: the
        (candidate, consumer name) whose sampled requests it repeats (a retaken proposal);
        ``anchor``: it may spend the tokens :attr:`held`."""
        with self._lock:
            owner = self.consumers.get(share) if share else None
            pool = owner.allowance if owner is not None else None
            if pool is None and allowance is not None:
                pool = Allowance(allowance)
            c = Consumer(
                name,
                "rsi-" + secrets.token_urlsafe(24),
                candidate,
                slot,
                frozenset(models) if models is not None else None,
                allowance=pool,
                draws=draws,
                anchor=anchor,
            )
            self.consumers[c.token] = c
        return c

    def client(self, name: str, *, candidate: str | None = None, slot: str | None = None) -> Any:
        """An in-process client (``rsiframe.llm.GatewayClient``) for one consumer."""
        from rsiframe.llm import GatewayClient

        assert self.port is not None, "start() the gateway first"
        return GatewayClient(self.url, self.consumer(name, candidate=candidate, slot=slot).token)

    def revoke(self, consumer: Consumer) -> dict[str, Any]:
        """The token stops working; a sandbox endpoint's socket stops serving. Returns what
        it called (``ModelUsage.as_json``)."""
        with self._lock:
            self.consumers.pop(consumer.token, None)
            server = self._sandboxes.pop(consumer.token, None)
        if server is not None:
            server.should_exit = True
        return consumer.usage.as_json()

    def revoke_endpoints(self, *endpoints: SandboxEndpoint) -> dict[str, Any]:
        """Revoke sandbox endpoints; what they called, per model, summed."""
        from rsiframe.gateway.bounds import merge_usage

        reports = []
        for ep in endpoints:
            c = self.consumers.get(ep.token)
            if c is not None:
                reports.append(self.revoke(c))
        refusals = {k: v for r in reports for k, v in r["refusals"].items()}
        return {"models": merge_usage(reports), "refusals": refusals}

    def sandbox_endpoint(
        self,
        name: str,
        *,
        model: str,
        candidate: str | None = None,
        slot: str | None = None,
        allowance: int | None = None,
        share: str | None = None,
        draws: tuple[str, str] | None = None,
        anchor: bool = False,
    ) -> SandboxEndpoint:
        """A Unix socket in a folder of its own, served by this gateway, with a token bound
        to ``model`` alone."""
        from rsiframe.dth.serving import SOCKET

        c = self.consumer(
            name,
            candidate=candidate,
            slot=slot,
            models=[model],
            allowance=allowance,
            share=share,
            draws=draws,
            anchor=anchor,
        )
        folder = self.socket_root / secrets.token_hex(8)
        folder.mkdir(parents=True, mode=0o700)
        path = folder / SOCKET
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        os.chmod(path, 0o777)
        folder.chmod(0o755)
        self._sandboxes[c.token] = self._serve_socket(sock)
        return SandboxEndpoint(name, folder, c.token, model)

    # -- serving ------------------------------------------------------------------------

    def start(self, port: int = 0, host: str = "127.0.0.1") -> Gateway:
        """Serve on ``host:port`` (0: any free port) from a background event loop."""
        ready = threading.Event()

        def run() -> None:
            self._loop = _new_loop()
            asyncio.set_event_loop(self._loop)
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name="rsiframe-gateway")
        self._thread.start()
        ready.wait()
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted connections inherit it; without it small answers wait for delayed ACKs
        tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tcp.bind((host, port))
        self.port = tcp.getsockname()[1]
        self._serve_socket(tcp)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve_socket(self, sock: socket.socket, app: Any = None) -> Any:
        import uvicorn

        assert self._loop is not None, "start() the gateway first"
        config = uvicorn.Config(
            app or self.app, log_level="warning", lifespan="off", access_log=False
        )
        server = uvicorn.Server(config)
        done = asyncio.run_coroutine_threadsafe(server.serve(sockets=[sock]), self._loop)
        self._servers.append((server, sock, done))
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start listening")
            time.sleep(0.005)
        return server

    def stop(self, grace_s: float = 0.2) -> None:
        """Stop serving; calls in flight get ``grace_s`` seconds to finish and be recorded."""
        if self._loop is None:
            return
        for server, _sock, _done in self._servers:
            server.should_exit = True
        concurrent.futures.wait([d for _s, _k, d in self._servers], timeout=grace_s)

        async def close() -> None:
            for up in self._upstreams.values():
                await up.aclose()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        for _server, sock, _done in self._servers:
            with contextlib.suppress(OSError):
                sock.close()
        shutil.rmtree(self.socket_root, ignore_errors=True)
        self._loop = None

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request handling ----------------------------------------------------------------

    def _who(self, request: Request) -> Consumer:
        auth = request.headers.get("authorization", "")
        token = auth.removeprefix("Bearer ").strip() if auth else ""
        token = token or request.headers.get("x-api-key", "")
        c = self.consumers.get(token)
        if c is None:
            raise GatewayError(401, "unknown gateway token", "authentication_error")
        return c

    async def _models(self, request: Request) -> Response:
        try:
            c = self._who(request)
        except GatewayError as exc:
            return exc.response()
        names = sorted(n for n in self.specs if c.models is None or n in c.models)
        data = [{"id": n, "object": "model", "owned_by": "rsiframe"} for n in names]
        return JSONResponse({"object": "list", "data": data})

    def _upstream(self, name: str) -> _Upstream:
        up = self._upstreams.get(name)
        if up is None:
            r = self.resolved[name]
            limits = httpx.Limits(max_connections=r.spec.max_concurrency)
            transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=NODELAY)
            client = httpx.AsyncClient(timeout=r.spec.timeout_s, transport=transport)
            pool = httpcore.AsyncConnectionPool(
                max_connections=r.spec.max_concurrency, socket_options=NODELAY
            )
            up = _Upstream(r, client, pool, asyncio.Semaphore(r.spec.max_concurrency))
            self._upstreams[name] = up
        return up

    def digest(self, path: str, body: Mapping[str, Any], consumer: Consumer) -> str:
        """The cache key: what was asked, and for a sampled call which call it was."""
        content = {k: v for k, v in body.items() if k not in TRANSPORT_KEYS}
        nonce = None
        if path != EMBEDDINGS and is_sampled(body):
            candidate, name = consumer.draws or (consumer.candidate, consumer.name)
            nonce = [candidate, consumer.slot, name, consumer.calls]
            consumer.calls += 1
        return sha256_json({"path": path, "body": content, "nonce": nonce})

    def _reserve(
        self, spec: ModelSpec, prompt: int, output: int, consumer: Consumer
    ) -> _Reservation:
        r = _Reservation(prompt + output, spec.price.cost(prompt, output), consumer, output)
        with self._lock:
            pool = consumer.allowance
            if pool is not None and pool.reserved + r.tokens > pool.limit - pool.spent:
                raise GatewayError(
                    429,
                    f"{consumer.name}: allowance of {pool.limit} tokens exhausted "
                    f"({pool.spent} spent, {pool.reserved} reserved, {r.tokens} asked)",
                    "budget_exhausted",
                    "allowance",
                )
            used = self.ledger.totals
            used_tokens = used.tokens + self.elsewhere[0]
            used_cost = used.cost_usd + self.elsewhere[1]
            lim = self.limits
            held = 0 if consumer.anchor else self.held
            if lim.max_model_tokens is not None and (
                used_tokens + self._reserved.tokens + r.tokens > lim.max_model_tokens - held
            ):
                why = f", {held} held for the champion's sealed evaluation" if held else ""
                raise GatewayError(
                    429,
                    f"model token budget exhausted ({used_tokens} used, "
                    f"{self._reserved.tokens} reserved, {r.tokens} asked, "
                    f"limit {lim.max_model_tokens}{why})",
                    "budget_exhausted",
                    "max_model_tokens",
                )
            if lim.max_cost is not None and (
                used_cost + self._reserved.cost + r.cost > lim.max_cost + 1e-12
            ):
                raise GatewayError(
                    429,
                    f"cost budget exhausted (${used_cost:.6f} spent, "
                    f"${r.cost:.6f} asked, limit ${lim.max_cost})",
                    "budget_exhausted",
                    "max_cost",
                )
            self._reserved.tokens += r.tokens
            self._reserved.cost += r.cost
            if pool is not None:
                pool.reserved += r.tokens
        return r

    def _release(self, r: _Reservation) -> None:
        with self._lock:
            self._reserved.tokens -= r.tokens
            self._reserved.cost -= r.cost
            if r.consumer is not None and r.consumer.allowance is not None:
                r.consumer.allowance.reserved -= r.tokens

    def _append(self, entry: Entry, consumer: Consumer | None) -> None:
        """Record one call (fsynced) and count it in its consumer's usage."""
        self.ledger.append(entry)
        if consumer is not None:
            consumer.usage.add(entry)

    async def _accept(self, request: Request) -> tuple[Consumer, bytes, dict[str, Any]]:
        """Who is calling and the body they sent (a JSON object), or GatewayError."""
        consumer = self._who(request)
        raw = await _read_body(request)
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise GatewayError(400, f"body is not JSON: {exc}", "invalid_request_error") from exc
        if not isinstance(body, dict):
            raise GatewayError(400, "body is not a JSON object", "invalid_request_error")
        name = str(body.get("model", ""))
        if name not in self.specs:
            raise GatewayError(
                404,
                f"unknown model {name!r}; declared: {', '.join(sorted(self.specs))}",
                "invalid_request_error",
                "model_not_found",
            )
        if name in self.unresolved:
            msg = f"model {name!r} is not configured: {self.unresolved[name]}"
            raise GatewayError(503, msg, "upstream_error", "not_configured")
        if PATHS[request.url.path] != self.specs[name].api:
            raise GatewayError(
                400, f"model {name!r} does not speak {request.url.path}", "invalid_request_error"
            )
        return consumer, raw, body

    def _bound(self, consumer: Consumer, path: str, body: dict[str, Any]) -> OutputBound:
        """The call's output bound, once its model is one the token was given; a refusal
        (403 ``model_not_allowed``, 400 ``invalid_limit``) is a GatewayError."""
        name = str(body["model"])
        if consumer.models is not None and name not in consumer.models:
            given = ", ".join(sorted(consumer.models)) or "none"
            msg = f"{consumer.name}: this token may call {given}, not {name!r}"
            raise GatewayError(403, msg, "permission_error", "model_not_allowed")
        if path == EMBEDDINGS and (embedding_inputs(body) is None or body.get("stream")):
            msg = "embeddings: input must be a string or a list of strings, not streamed"
            raise GatewayError(400, msg, "invalid_request_error", "invalid_input")
        try:
            return output_bound(path, body)
        except LimitRefused as exc:
            raise GatewayError(400, str(exc), "invalid_request_error", "invalid_limit") from exc

    def _entry(self, consumer: Consumer, path: str, body: dict[str, Any], digest: str) -> Entry:
        c = consumer
        model = str(body.get("model", ""))
        stream = bool(body.get("stream"))
        return Entry(
            0, time.time(), path, model, c.name, c.candidate, c.slot, digest, 0, stream=stream
        )

    async def _forward(self, request: Request) -> Response:
        path = request.url.path
        t0 = time.perf_counter()
        try:
            consumer, raw, body = await self._accept(request)
        except GatewayError as exc:
            return exc.response()
        try:
            bound = self._bound(consumer, path, body)
        except GatewayError as exc:  # refused, and recorded with its reason
            refused = self._entry(consumer, path, body, sha256_json({"path": path, "body": body}))
            refused.request = self.ledger.put(raw)
            self._append(_done(refused, exc.status, t0, error=exc.message, code=exc.code), consumer)
            return exc.response()
        base = self._entry(consumer, path, body, self.digest(path, body, consumer))
        hit = self.ledger.cache.get(base.digest)
        if hit is not None:
            return self._replay(hit, base, t0, consumer)
        spec = self.specs[base.model]
        prompt_est = prompt_estimate(path, body)
        try:
            reservation = self._reserve(spec, prompt_est, bound.tokens, consumer)
        except GatewayError as exc:
            self._append(_done(base, 429, t0, error=exc.message, code=exc.code), consumer)
            return exc.response()
        base.request = self.ledger.put(raw)
        base.reserved_tokens, base.rewritten = reservation.tokens, bound.rewritten
        if self.archive is not None:  # a replay: the source run's recorded answer, or none
            return self._from_archive(base, reservation, t0)
        return await self._send(
            path, {**bound.body, "model": spec.model}, base, reservation, t0, prompt_est
        )

    async def _send(
        self,
        path: str,
        upstream_body: dict[str, Any],
        base: Entry,
        reservation: _Reservation,
        t0: float,
        prompt_est: int,
    ) -> Response:
        name, spec = base.model, self.specs[base.model]
        headers = {LIMITS_HEADER: base.rewritten} if base.rewritten else None
        if upstream_body.get("stream") and path in ("/v1/chat/completions", "/v1/completions"):
            upstream_body["stream_options"] = {
                **(upstream_body.get("stream_options") or {}),
                "include_usage": True,
            }
        if upstream_body.get("stream"):
            return await self._stream(
                name, path, upstream_body, base, reservation, t0, prompt_est, headers
            )
        # A call sent to the provider is paid for: if the client leaves (a killed driver, a
        # sandbox past its time) the call still completes and is recorded, so the retry
        # that follows is served from the ledger instead of paying twice.
        call = asyncio.ensure_future(
            self._complete(name, path, upstream_body, base, spec, reservation, prompt_est, t0)
        )
        data = await asyncio.shield(call)
        if isinstance(data, GatewayError):
            return data.response()
        return Response(data, 200, media_type="application/json", headers=headers)

    async def _complete(
        self,
        name: str,
        path: str,
        body: dict[str, Any],
        base: Entry,
        spec: ModelSpec,
        reservation: _Reservation,
        prompt_est: int,
        t0: float,
    ) -> bytes | GatewayError:
        """Forward one call and record it (fsynced) before its answer goes anywhere."""
        try:
            data, parsed = await self._call(name, path, body)
        except GatewayError as exc:
            self._release(reservation)
            failed = _done(base, exc.status, t0, error=exc.message, code=exc.code)
            await asyncio.to_thread(self._append, failed, reservation.consumer)
            return exc
        self._release(reservation)
        answer = _answer_text(parsed)
        entry = self._meter(base, spec, parsed.get("usage"), prompt_est, answer, t0, reservation)
        reservation.charge(entry)

        def record() -> None:
            entry.response = self.ledger.put(data)
            self._append(entry, reservation.consumer)

        # durable before the answer goes back, but off the event loop: other calls go on,
        # and the ledger syncs the calls that finish meanwhile together (group commit)
        await asyncio.to_thread(record)
        return data

    def _meter(
        self,
        base: Entry,
        spec: ModelSpec,
        usage: Any,
        prompt_est: int,
        answer: str,
        t0: float,
        reservation: _Reservation,
    ) -> Entry:
        """The call's entry, charged the prompt as counted and at most the output it
        reserved; output past that is the provider's violation, recorded, not charged."""
        p, c = _usage_numbers(usage)
        if base.path == EMBEDDINGS:  # an embedding has input tokens only
            c = 0 if p is not None else None
        source = "provider"
        if p is None or c is None:
            p, c, source = prompt_est, estimate_tokens(answer), "estimate"
            c = 0 if base.path == EMBEDDINGS else c
        cut = cap_charge(p, c, reservation.output)
        e = _done(base, 200, t0)
        e.prompt_tokens, e.completion_tokens, e.usage_source = p, cut.completion_tokens, source
        e.cost_usd = spec.price.cost(p, cut.completion_tokens)
        e.excess_tokens, e.violation = cut.excess_tokens, cut.violation
        e.excess_cost_usd = spec.price.cost(0, cut.excess_tokens)
        return e

    def _replay(self, hit: Entry, base: Entry, t0: float, consumer: Consumer) -> Response:
        data = self.ledger.get(hit.response or "")
        e = _done(base, 200, t0)
        e.cached, e.request, e.response = True, hit.request, hit.response
        self._append(e, consumer)
        kind = "text/event-stream" if hit.stream else "application/json"
        return Response(data, 200, media_type=kind)

    def _from_archive(self, base: Entry, reservation: _Reservation, t0: float) -> Response:
        """A replay's answer: the source run's recorded response to this request digest,
        charged the tokens and cost the source recorded (``cached``: nothing is paid, and
        budget decisions fall as they did), or 409 ``not_recorded`` (fails closed)."""
        assert self.archive is not None
        self._release(reservation)
        hit = self.archive.cache.get(base.digest)
        if hit is None or not hit.response:
            msg = (
                f"request {base.digest[:12]} is not recorded in the replayed run's archive "
                "(a replay calls no endpoint)"
            )
            refused = _done(base, 409, t0, error=msg, code="not_recorded")
            self._append(refused, reservation.consumer)
            return GatewayError(409, msg, "replay_error", "not_recorded").response()
        data = self.archive.get(hit.response)
        e = _done(base, 200, t0)
        e.cached, e.usage_source, e.response = True, "archive", self.ledger.put(data)
        e.prompt_tokens, e.completion_tokens = hit.prompt_tokens, hit.completion_tokens
        e.cost_usd = hit.cost_usd
        reservation.charge(e)
        self._append(e, reservation.consumer)
        kind = "text/event-stream" if hit.stream else "application/json"
        return Response(data, 200, media_type=kind)

    async def _call(
        self, name: str, path: str, body: dict[str, Any]
    ) -> tuple[bytes, dict[str, Any]]:
        """POST to the provider, retrying 429, 5xx, timeouts, unreachable and non-JSON
        answers; GatewayError(502) once the retries are spent."""
        up = self._upstream(name)
        spec = up.resolved.spec
        last = ""
        for attempt in range(spec.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff * (2 ** (attempt - 1)))
            try:
                async with up.gate:
                    status, content = await up.post(path, body)
            except httpcore.TimeoutException:
                last = f"timed out after {spec.timeout_s:g}s"
                continue
            except _UNREACHABLE as exc:
                last = f"unreachable: {type(exc).__name__}: {exc}"
                continue
            if status == 200:
                try:
                    parsed = json.loads(content)
                except ValueError:
                    last = "the answer is not JSON"
                    continue
                if isinstance(parsed, dict):
                    return content, parsed
                last = "the answer is not a JSON object"
                continue
            last = f"HTTP {status}: {content[:200].decode(errors='replace')}"
            if status != 429 and status < 500:
                msg = f"provider refused ({_where(up.resolved)}): {last}"
                raise GatewayError(status, msg, "upstream_error", UPSTREAM)
        tries = spec.retries + 1
        msg = f"model {name!r} ({_where(up.resolved)}) failed after {tries} attempts: {last}"
        raise GatewayError(502, msg, "upstream_error", UPSTREAM)

    async def _stream(
        self,
        name: str,
        path: str,
        body: dict[str, Any],
        base: Entry,
        reservation: _Reservation,
        t0: float,
        prompt_est: int,
        headers: dict[str, str] | None = None,
    ) -> Response:
        up = self._upstream(name)
        spec = up.resolved.spec
        url = up.resolved.base_url + path.removeprefix("/v1")
        last = ""
        for attempt in range(spec.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff * (2 ** (attempt - 1)))
            try:
                await up.gate.acquire()
                req = up.client.build_request("POST", url, json=body, headers=_auth(up.resolved))
                r = await up.client.send(req, stream=True)
            except httpx.HTTPError as exc:
                up.gate.release()
                last = f"{type(exc).__name__}: {exc}"
                continue
            if r.status_code == 200:
                return StreamingResponse(
                    self._relay(r, up, base, spec, reservation, t0, prompt_est),
                    media_type="text/event-stream",
                    headers=headers,
                )
            text = (await r.aread())[:200].decode(errors="replace")
            await r.aclose()
            up.gate.release()
            last = f"HTTP {r.status_code}: {text}"
            if r.status_code != 429 and r.status_code < 500:
                break
        self._release(reservation)
        msg = f"model {name!r} ({_where(up.resolved)}) failed after {attempt + 1} attempts: {last}"
        self._append(_done(base, 502, t0, error=msg, code=UPSTREAM), reservation.consumer)
        return GatewayError(502, msg, "upstream_error", UPSTREAM).response()

    async def _relay(
        self,
        r: httpx.Response,
        up: _Upstream,
        base: Entry,
        spec: ModelSpec,
        reservation: _Reservation,
        t0: float,
        prompt_est: int,
    ) -> AsyncIterator[bytes]:
        # The last chunk is held back until the call is recorded, so a client never sees
        # the end of a stream whose call is not yet in the ledger.
        kept = bytearray()
        held = b""
        recorded = False

        def record(status: int, error: str | None) -> None:
            usage: dict[str, Any] = {}
            text: list[str] = []
            for event in _sse_events(bytes(kept)):
                _collect(event, usage, text)
            answer = "".join(text)
            entry = self._meter(base, spec, usage or None, prompt_est, answer, t0, reservation)
            reservation.charge(entry)
            entry.status, entry.error = status, error
            if status == 200:
                entry.response = self.ledger.put(bytes(kept))
            self._append(entry, reservation.consumer)

        try:
            async for chunk in r.aiter_bytes():
                kept += chunk
                if held:
                    yield held
                held = chunk
            await r.aclose()
            up.gate.release()
            self._release(reservation)
            record(200, None)
            recorded = True
            if held:
                yield held
        finally:
            if not recorded:  # the client or the provider left: paid for, never cached
                await r.aclose()
                up.gate.release()
                self._release(reservation)
                record(499, "stream ended early (client disconnected or provider failed)")


async def _read_body(request: Request) -> bytes:
    """The body, refused past MAX_BODY before it is all read."""
    size = int(request.headers.get("content-length") or 0)
    if size > MAX_BODY:
        raise GatewayError(413, "request body too large", "invalid_request_error")
    out = bytearray()
    async for chunk in request.stream():
        out += chunk
        if len(out) > MAX_BODY:
            raise GatewayError(413, "request body too large", "invalid_request_error")
    return bytes(out)


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (the ``llm`` extra), asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _where(r: ResolvedModel) -> str:
    """The provider's model and endpoint, for an error that must say which is broken."""
    return f"{r.spec.model} at {r.base_url}"


def _auth(r: ResolvedModel) -> dict[str, str]:
    if r.spec.api == "anthropic":
        return {"x-api-key": r.api_key, "anthropic-version": "2023-06-01"}
    return {"Authorization": f"Bearer {r.api_key}"} if r.api_key else {}


def _done(
    base: Entry, status: int, t0: float, error: str | None = None, code: str | None = None
) -> Entry:
    e = replace(base)  # a shallow copy: an Entry holds only numbers and strings
    e.status, e.error, e.code = status, error, code
    e.latency_ms = round((time.perf_counter() - t0) * 1000, 3)
    return e


def _usage_numbers(usage: Any) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None
    p = usage.get("prompt_tokens", usage.get("input_tokens"))
    c = usage.get("completion_tokens", usage.get("output_tokens"))
    return (p if isinstance(p, int) else None), (c if isinstance(c, int) else None)


def _answer_text(parsed: Mapping[str, Any]) -> str:
    out: list[str] = []
    for ch in parsed.get("choices") or []:
        msg = ch.get("message") or {}
        out.append(str(ch.get("text") or msg.get("content") or ""))
    for block in parsed.get("content") or []:
        if isinstance(block, dict):
            out.append(str(block.get("text", "")))
    return "".join(out)


def _sse_events(data: bytes) -> list[dict[str, Any]]:
    events = []
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload and payload != "[DONE]":
                with contextlib.suppress(ValueError):
                    obj = json.loads(payload)
                    if isinstance(obj, dict):
                        events.append(obj)
    return events


def _collect(event: Mapping[str, Any], usage: dict[str, Any], text: list[str]) -> None:
    """Usage and answer text from one streamed event (OpenAI, Responses or Anthropic)."""
    for holder in (event, event.get("response") or {}, event.get("message") or {}):
        u = holder.get("usage") if isinstance(holder, dict) else None
        if isinstance(u, dict):
            for k, v in u.items():
                if isinstance(v, int):
                    usage[k] = max(usage.get(k, 0), v)
    for ch in event.get("choices") or []:
        delta = ch.get("delta") or {}
        text.append(str(ch.get("text") or delta.get("content") or ""))
    delta = event.get("delta")
    if isinstance(delta, dict) and isinstance(delta.get("text"), str):
        text.append(delta["text"])


# -- running it as its own process -----------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run a gateway for a recipe's models until interrupted (prints a consumer token)."""
    from rsiframe.recipe import load as recipe_mod

    ap = argparse.ArgumentParser(prog="rsiframe.gateway.app", description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", type=Path, required=True)
    ap.add_argument("--state", type=Path, required=True, help="folder for ledger and evidence")
    ap.add_argument("--port", type=int, default=8790)
    args = ap.parse_args(argv)
    try:
        r = recipe_mod.load(args.recipe).recipe
        for spec in r.models.values():  # every variable set, or one line now
            spec.resolve()
        gw = Gateway(
            r.models,
            Ledger(args.state),
            limits=Limits(r.budget.max_model_tokens, r.budget.max_cost),
        ).start(args.port)
    except RsiError as exc:
        print(f"rsiframe.gateway.app: error: {exc}", file=sys.stderr)
        return exc.exit_code
    token = gw.consumer("cli").token
    print(json.dumps({"url": gw.url, "token": token}), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        gw.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["Consumer", "Entry", "Gateway", "Ledger", "Limits", "SandboxEndpoint"]
