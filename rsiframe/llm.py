"""The client operators use to reach models: always through the run's gateway.

An operator names a model from the recipe's ``models:`` and calls
``llm.current().chat(model, messages, ...)``. The engine (:mod:`rsiframe.gateway.runmodels`)
installs a client bound to the operator's own gateway token, candidate and slot with
:func:`use` around each operator call; tests do the same. The gateway, not this client,
meters and records every call; :class:`Completion` only reports what the gateway said.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import httpx

from rsiframe.errors import ModelError


class BudgetExhausted(ModelError):
    """The gateway refused a call: ``max_model_tokens`` or ``max_cost`` is spent (``code``
    names which), or the operation's own allowance (``code == "allowance"``)."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    raw: dict[str, Any]


@dataclass(frozen=True)
class Embeddings:
    vectors: list[list[float]]  # one per input, in order
    prompt_tokens: int


@runtime_checkable
class EmbeddingClient(Protocol):
    def embed(self, model: str, texts: list[str]) -> Embeddings: ...


class ModelClient(Protocol):
    def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        **params: Any,
    ) -> Completion: ...


@functools.cache
def _tls() -> ssl.SSLContext:
    """The process's one TLS context for gateway clients. httpx builds a new one per client
    by default, loading the CA bundle (about 20 ms); the engine opens a client for every
    operator call (select, gate, record), and that was two thirds of its writer's time
    with four candidates in flight (``bench/peers.py --latency``)."""
    return httpx.create_ssl_context()


class GatewayClient:
    """A kept HTTP client to the gateway, authenticated by one consumer's token."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 600.0,
        after: Callable[[], Any] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        auth = {"Authorization": f"Bearer {token}"}
        self._http = httpx.Client(timeout=timeout, headers=auth, verify=_tls())
        #: runs after every call, answered or not (the engine records the call at once)
        self.after = after

    def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        **params: Any,
    ) -> Completion:
        body: dict[str, Any] = {"model": model, "messages": messages, "temperature": temperature}
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        body.update(params)
        data = self._post("/chat/completions", body)
        try:
            text = data["choices"][0]["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ModelError(f"model {model!r} answered without a message") from exc
        return Completion(
            str(text), _tokens(data, "prompt_tokens"), _tokens(data, "completion_tokens"), data
        )

    def embed(self, model: str, texts: list[str]) -> Embeddings:
        """The embedding of each text (``/v1/embeddings``), metered like a chat call."""
        data = self._post("/embeddings", {"model": model, "input": list(texts)})
        try:
            rows = sorted(data["data"], key=lambda row: int(row["index"]))
            vectors = [[float(v) for v in row["embedding"]] for row in rows]
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"model {model!r} answered without embeddings") from exc
        if len(vectors) != len(texts):
            raise ModelError(f"model {model!r} answered {len(vectors)} of {len(texts)} embeddings")
        return Embeddings(vectors, _tokens(data, "prompt_tokens"))

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = self._http.post(self.base_url + path, json=body)
        except httpx.HTTPError as exc:
            raise ModelError(f"the model gateway is unreachable: {exc}") from exc
        finally:
            if self.after is not None:
                self.after()
        try:
            data = r.json()
        except ValueError as exc:
            raise ModelError(f"the gateway answered HTTP {r.status_code} without JSON") from exc
        if r.status_code != 200:
            err = data.get("error") if isinstance(data, dict) else None
            message = err.get("message") if isinstance(err, dict) else str(data)[:200]
            if isinstance(err, dict) and err.get("type") == "budget_exhausted":
                raise BudgetExhausted(str(message), err.get("code"))
            raise ModelError(f"model call failed (HTTP {r.status_code}): {message}")
        if not isinstance(data, dict):
            raise ModelError("the gateway answered with something other than a JSON object")
        return data

    def close(self) -> None:
        self._http.close()


class SandboxEndpoints(Protocol):
    """Opens a gateway endpoint for a sandbox: an object whose ``harness(sb, argv)`` gives
    the wrapped command, its mounts and environment (``gateway.SandboxEndpoint``)."""

    def __call__(self, name: str, *, model: str) -> Any: ...


_current: contextvars.ContextVar[ModelClient | None] = contextvars.ContextVar(
    "rsiframe_model_client", default=None
)
_endpoints: contextvars.ContextVar[SandboxEndpoints | None] = contextvars.ContextVar(
    "rsiframe_sandbox_endpoints", default=None
)


@contextlib.contextmanager
def use(client: ModelClient, endpoints: SandboxEndpoints | None = None) -> Iterator[ModelClient]:
    """Make ``client`` (and ``endpoints``, for sandboxed agents) what this call uses."""
    token = _current.set(client)
    etoken = _endpoints.set(endpoints)
    try:
        yield client
    finally:
        _endpoints.reset(etoken)
        _current.reset(token)


def sandbox_endpoints() -> SandboxEndpoints:
    """How a sandboxed agent reaches the gateway; ModelError when the run has none."""
    endpoints = _endpoints.get()
    if endpoints is None:
        raise ModelError("no model gateway for sandboxed agents in this call")
    return endpoints


def embed(model: str, texts: list[str]) -> Embeddings:
    """Embeddings of ``texts`` by ``model`` through this call's gateway client."""
    client = current()
    if not isinstance(client, EmbeddingClient):
        raise ModelError("this call's model client cannot embed")
    return client.embed(model, texts)


def current() -> ModelClient:
    """The model client for this operator call; ModelError when the run has no gateway."""
    client = _current.get()
    if client is None:
        raise ModelError(
            "no model gateway for this call: model operators need a run with a models: section"
        )
    return client


def _tokens(data: dict[str, Any], key: str) -> int:
    """A count of the answer's ``usage`` as the provider reported it (0 when it is missing
    or not a count: the gateway meters every call itself, this is the operator's report)."""
    usage = data.get("usage")
    value = usage.get(key, 0) if isinstance(usage, dict) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
