"""A scripted, OpenAI-compatible stub endpoint for tests, benchmarks and README demos.

It answers ``POST /v1/chat/completions`` (streaming included), ``/v1/completions``,
``/v1/responses`` and ``/v1/messages`` (Anthropic) and ``GET /v1/models`` from a script
file, ``POST /v1/embeddings`` outside the script (see :func:`embed_text`), and counts
every request and token so a test can compare the gateway's ledger with what the
"provider" saw (``GET /stub/stats``, or :attr:`StubLLM.stats`).

The script (YAML or JSON) is a mapping with ``answers`` (a list, used in order) and an
optional ``default`` (used once the list is exhausted; without one the stub answers 503).
Each answer is a mapping:

- ``content: TEXT``: the answer text (SEARCH/REPLACE blocks, a whole file, anything);
- ``tool_calls: [{name, arguments}]``: chat tool calls (``arguments`` a mapping);
- ``status: 429 | 500 | ...``: an OpenAI-shaped error with that status;
- ``malformed: true``: a 200 whose body is not JSON;
- ``delay_s: S``: wait before answering (a client timeout);
- ``chunk_delay_s: S``: with ``stream``, wait between chunks (a slow stream);
- ``when: TEXT``: only used when the request's last message contains TEXT; a list of
  texts: only when it contains every one of them;
- ``variants: [{content, tool_calls}, ...]``: the answer's content and tool calls are one
  of these, picked by a hash of the last message and of how many times this answer has
  already answered that same message (a sampled model: the k-th request with the same
  prompt may get another variant; the same sequence of requests gets the same answers);
- ``model: NAME``: only used when the request names this (upstream) model;
- ``fill: true``: the answer runs to the request's output limit (``max_tokens``,
  ``max_completion_tokens``, ``max_output_tokens``), or :data:`OWN_LIMIT` tokens without one;
- ``tokens: N``: the answer is N tokens whatever the request's limit (a provider that
  ignores it);
- ``repeat: true``: not consumed when used.

The script's optional ``embeddings: hashed | same`` says how ``/v1/embeddings`` answers:
``hashed`` (the default) a deterministic vector from each input's words (equal texts,
equal vectors; texts sharing most words are close), ``same`` one constant vector for
every input (every child looks identical to a novelty check). Embedding calls use no
scripted answer.

Like a provider, the stub honours the request's output limit (a longer ``content`` is cut
to it), answers ``n`` choices (chat and completions; ``best_of`` is billed too) and refuses
a limit that is not a positive integer (400).

The models' check that ``run``, ``resume`` and ``doctor`` make first (the tiny call of
:mod:`rsiframe.gateway.modelcheck`) is answered ``ok`` outside the script and counted
apart (``checks``, ``check_tokens``), as the run keeps it apart: a script written for a
run's operators is not shifted by it. ``StubLLM(script, checks_apart=False)`` scripts it
like any call (a stub that must fail the check).

Tokens are counted the same way everywhere: ``max(1, ceil(len(text) / 4))`` of the
prompt text (every message's content joined) and of each answer.

    rsiframe stub-llm --script answers.yaml --port 8765
    python -m rsiframe.gateway.stub --script answers.yaml --port 8765
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import uvicorn
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rsiframe import yamlsafe
from rsiframe.errors import RecipeError
from rsiframe.gateway.app import embedding_inputs, estimate_tokens, prompt_text
from rsiframe.gateway.modelcheck import PING


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Variant(BaseModel):
    """One of an answer's ``variants``: what the answer says when it is picked."""

    model_config = ConfigDict(extra="forbid")
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)


class Answer(BaseModel):
    """One scripted answer (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    variants: list[Variant] = Field(default_factory=list)
    status: int = 200
    malformed: bool = False
    delay_s: float = Field(0.0, ge=0)
    chunk_delay_s: float = Field(0.0, ge=0)
    when: str | list[str] | None = None
    model: str | None = None
    fill: bool = False
    tokens: int | None = Field(None, ge=1)
    repeat: bool = False


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    answers: list[Answer] = Field(default_factory=list)
    default: Answer | None = None
    embeddings: Literal["hashed", "same"] = "hashed"

    @classmethod
    def load(cls, path: Path) -> Script:
        """Read a script file; a missing or invalid one is one RecipeError line."""
        try:
            data = yamlsafe.load(Path(path).read_text()) or {}
            return cls.model_validate(data)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise RecipeError(f"cannot read the stub script: {exc}", where=str(path)) from exc
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise RecipeError(f"{loc}: {err['msg']}", where=str(path)) from exc


def count_tokens(text: str) -> int:
    """The stub's (and its tests') token count: a quarter of the characters, at least 1."""
    return estimate_tokens(text)


#: the dimension of the stub's embedding vectors
EMBED_DIM = 64
_WORD = re.compile(r"\w+|[^\w\s]")


def embed_text(text: str, mode: str = "hashed") -> list[float]:
    """The stub's embedding of ``text``: a unit vector from a hashed bag of its words
    (each word adds ±1 at a position its SHA-256 picks), or (``same``) one constant unit
    vector whatever the text."""
    vec = [0.0] * EMBED_DIM
    if mode == "same":
        vec[0] = 1.0
        return vec
    for word in _WORD.findall(text):
        h = hashlib.sha256(word.encode()).digest()
        vec[int.from_bytes(h[:4], "big") % EMBED_DIM] += 1.0 if h[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


#: tokens a stub answer with ``fill`` runs to when the request sets no output limit
OWN_LIMIT = 100_000
#: the output limit each path reads, in the order a provider prefers them
LIMIT_KEYS = {
    "/v1/chat/completions": ("max_completion_tokens", "max_tokens"),
    "/v1/completions": ("max_tokens",),
    "/v1/responses": ("max_output_tokens",),
    "/v1/messages": ("max_tokens",),
}


def _positive(body: dict[str, Any], key: str) -> int | None:
    """``body[key]`` as a provider reads it: None when unset, ValueError when not a
    positive integer."""
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{key} must be a positive integer, got {v!r}")
    return v


def shape(path: str, body: dict[str, Any]) -> tuple[int | None, int, int]:
    """(output limit per choice, choices answered, choices billed) of a request, read as a
    provider would; ValueError for a limit it refuses."""
    limit = next((x for k in LIMIT_KEYS[path] if (x := _positive(body, k)) is not None), None)
    n = best_of = 1
    if path in ("/v1/chat/completions", "/v1/completions"):
        n = _positive(body, "n") or 1
        best_of = max(n, _positive(body, "best_of") or 1)
    return limit, n, best_of


def answer_text(answer: Answer, limit: int | None) -> str:
    """One choice's text: ``tokens`` as asked, ``fill`` to the limit, else the content cut
    to the limit (4 characters a token)."""
    if answer.tokens is not None:
        return "tok " * answer.tokens
    if answer.fill:
        return "tok " * (limit or OWN_LIMIT)
    return answer.content if limit is None else answer.content[: 4 * limit]


@dataclass
class Stats:
    requests: int = 0
    answered: int = 0  # 200 answers with usage (what a provider would bill)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    by_path: dict[str, int] = field(default_factory=dict)
    checks: int = 0  # the models' check, answered apart (see the module)
    check_tokens: int = 0  # its prompt and answer tokens

    def as_dict(self) -> dict[str, Any]:
        return {
            "checks": self.checks,
            "check_tokens": self.check_tokens,
            "requests": self.requests,
            "answered": self.answered,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "by_path": dict(self.by_path),
        }


class StubLLM:
    """The stub's state: the script, what is left of it, and the counts."""

    def __init__(self, script: Script, *, checks_apart: bool = True) -> None:
        self.script = script
        self.checks_apart = checks_apart
        self.remaining = list(script.answers)
        self.stats = Stats()
        self.requests: list[dict[str, Any]] = []  # every body received, in order
        self.auth: list[str] = []  # the Authorization (or x-api-key) header of each
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, str], int] = {}  # (answer, message) -> times answered
        self.app = Starlette(
            routes=[
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/stub/stats", self._stats, methods=["GET"]),
            ]
        )

    def next_answer(self, last: str, model: str = "") -> Answer | None:
        with self._lock:
            for i, a in enumerate(self.remaining):
                if _matches(a.when, last) and a.model in (None, model):
                    if not a.repeat:
                        del self.remaining[i]
                    return self._variant(a, last)
            return self.script.default

    def _variant(self, answer: Answer, last: str) -> Answer:
        """``answer`` itself, or (with ``variants``) the variant this request picks: a
        hash of the message and of how often this answer has answered it before."""
        if not answer.variants:
            return answer
        key = (id(answer), last)
        seen = self._seen.get(key, 0)
        self._seen[key] = seen + 1
        digest = hashlib.sha256(f"{seen}\n{last}".encode()).digest()
        pick = answer.variants[int.from_bytes(digest[:8], "big") % len(answer.variants)]
        return answer.model_copy(update={"content": pick.content, "tool_calls": pick.tool_calls})

    # -- handlers -------------------------------------------------------------------

    async def _stats(self, request: Request) -> Response:
        return JSONResponse(self.stats.as_dict())

    async def _models(self, request: Request) -> Response:
        self.stats.requests += 1
        return JSONResponse({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def _begin(self, request: Request) -> tuple[dict[str, Any], Answer | Response, int]:
        """The body, the answer (or the error response) and the prompt's tokens; the
        answer comes back with its ``content`` as each choice will read."""
        path = request.url.path
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        if self.checks_apart and _is_check(body):
            return body, CHECK_ANSWER, count_tokens(prompt_text(path, body))  # billed apart
        with self._lock:
            self.stats.requests += 1
            self.stats.by_path[path] = self.stats.by_path.get(path, 0) + 1
        if body is None:
            return {}, _error(400, "body is not JSON"), 0
        if not isinstance(body, dict):
            return {}, _error(400, "body is not a JSON object"), 0
        self.requests.append(body)
        self.auth.append(
            request.headers.get("authorization") or request.headers.get("x-api-key", "")
        )
        text = prompt_text(path, body)
        msgs = body.get("messages")
        last = str(msgs[-1].get("content", "")) if isinstance(msgs, list) and msgs else text
        answer = self.next_answer(last, str(body.get("model", "")))
        if answer is None:
            return body, _error(503, "the stub's script is exhausted"), 0
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        try:
            limit, _n, _billed = shape(path, body)
        except ValueError as exc:
            return body, _error(400, str(exc)), 0
        if answer.status != 200:
            return body, _error(answer.status, f"scripted {answer.status}"), 0
        if answer.malformed:
            return body, Response(b"{not json", media_type="application/json"), 0
        return (
            body,
            answer.model_copy(update={"content": answer_text(answer, limit)}),
            count_tokens(text),
        )

    def _choices(self, path: str, body: dict[str, Any], answer: Answer, prompt: int) -> int:
        """Bill the call (every choice generated, ``best_of`` included); the tokens of one."""
        _limit, _n, billed = shape(path, body)
        one = count_tokens(answer.content + "".join(_tc_json(answer)))
        if answer is CHECK_ANSWER:  # the models' check: billed apart
            with self._lock:
                self.stats.checks += 1
                self.stats.check_tokens += prompt + one * billed
            return one
        self._bill(prompt, one * billed)
        return one

    def _bill(self, prompt: int, completion: int) -> None:
        with self._lock:
            self.stats.answered += 1
            self.stats.prompt_tokens += prompt
            self.stats.completion_tokens += completion

    async def _chat(self, request: Request) -> Response:
        body, answer, prompt = await self._begin(request)
        if isinstance(answer, Response):
            return answer
        path = "/v1/chat/completions"
        one = self._choices(path, body, answer, prompt)
        _limit, n, billed = shape(path, body)
        usage = _usage(prompt, one * billed)
        model = str(body.get("model", "stub"))
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                _chat_stream(answer, model, usage if include else None, n),
                media_type="text/event-stream",
            )
        message: dict[str, Any] = {"role": "assistant", "content": answer.content or None}
        if answer.tool_calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": t.name, "arguments": json.dumps(t.arguments)},
                }
                for i, t in enumerate(answer.tool_calls)
            ]
        finish = "tool_calls" if answer.tool_calls else "stop"
        choices = [{"index": i, "message": message, "finish_reason": finish} for i in range(n)]
        return JSONResponse(
            {
                "id": "chatcmpl-stub",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": choices,
                "usage": usage,
            }
        )

    async def _embeddings(self, request: Request) -> Response:
        """Embeddings of a string or a list of strings, billed their prompt tokens."""
        path = "/v1/embeddings"
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        with self._lock:
            self.stats.requests += 1
            self.stats.by_path[path] = self.stats.by_path.get(path, 0) + 1
        texts = embedding_inputs(body)
        if texts is None:
            return _error(400, "input must be a string or a list of strings")
        assert isinstance(body, dict)
        self.requests.append(body)
        self.auth.append(request.headers.get("authorization", ""))
        prompt = sum(count_tokens(t) for t in texts)
        self._bill(prompt, 0)
        data = [
            {"object": "embedding", "index": i, "embedding": embed_text(t, self.script.embeddings)}
            for i, t in enumerate(texts)
        ]
        usage = {"prompt_tokens": prompt, "total_tokens": prompt}
        model = str(body.get("model", "stub"))
        return JSONResponse({"object": "list", "data": data, "model": model, "usage": usage})

    async def _completions(self, request: Request) -> Response:
        body, answer, prompt = await self._begin(request)
        if isinstance(answer, Response):
            return answer
        path = "/v1/completions"
        one = self._choices(path, body, answer, prompt)
        _limit, n, billed = shape(path, body)
        usage = _usage(prompt, one * billed)
        model = str(body.get("model", "stub"))
        if body.get("stream"):
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                _text_stream(answer, model, usage if include else None, n),
                media_type="text/event-stream",
            )
        choices = [{"index": i, "text": answer.content, "finish_reason": "stop"} for i in range(n)]
        return JSONResponse(
            {
                "id": "cmpl-stub",
                "object": "text_completion",
                "model": model,
                "choices": choices,
                "usage": usage,
            }
        )

    async def _responses(self, request: Request) -> Response:
        body, answer, prompt = await self._begin(request)
        if isinstance(answer, Response):
            return answer
        completion = self._choices("/v1/responses", body, answer, prompt)
        return JSONResponse(
            {
                "id": "resp-stub",
                "object": "response",
                "model": str(body.get("model", "stub")),
                "output": [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": answer.content}],
                    }
                ],
                "usage": {
                    "input_tokens": prompt,
                    "output_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )

    async def _messages(self, request: Request) -> Response:
        body, answer, prompt = await self._begin(request)
        if isinstance(answer, Response):
            return answer
        completion = self._choices("/v1/messages", body, answer, prompt)
        return JSONResponse(
            {
                "id": "msg-stub",
                "type": "message",
                "role": "assistant",
                "model": str(body.get("model", "stub")),
                "content": [{"type": "text", "text": answer.content}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": prompt, "output_tokens": completion},
            }
        )


#: what the stub answers the models' check with (see the module)
CHECK_ANSWER = Answer(content="ok")


def _matches(when: str | list[str] | None, last: str) -> bool:
    """Whether an answer's ``when`` (none, one text, or texts all required) fits ``last``."""
    if when is None:
        return True
    return all(w in last for w in ([when] if isinstance(when, str) else when))


def _is_check(body: Any) -> bool:
    """Whether ``body`` is the models' check (:data:`rsiframe.gateway.modelcheck.PING`)."""
    return isinstance(body, dict) and body.get("messages") == PING and not body.get("stream")


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _tc_json(answer: Answer) -> Iterator[str]:
    for t in answer.tool_calls:
        yield t.name + json.dumps(t.arguments)


def _error(status: int, message: str) -> JSONResponse:
    kind = "rate_limit_error" if status == 429 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": None}}, status)


def _pieces(text: str, n: int = 4) -> list[str]:
    size = max(1, math.ceil(len(text) / n))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


async def _chat_stream(
    answer: Answer, model: str, usage: dict[str, int] | None, n: int = 1
) -> AsyncIterator[bytes]:
    base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "model": model}
    for i in range(n):
        for piece in _pieces(answer.content):
            if answer.chunk_delay_s:
                await asyncio.sleep(answer.chunk_delay_s)
            delta = {"role": "assistant", "content": piece}
            yield _sse({**base, "choices": [{"index": i, "delta": delta, "finish_reason": None}]})
        yield _sse({**base, "choices": [{"index": i, "delta": {}, "finish_reason": "stop"}]})
    if usage is not None:
        yield _sse({**base, "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"


async def _text_stream(
    answer: Answer, model: str, usage: dict[str, int] | None, n: int = 1
) -> AsyncIterator[bytes]:
    base = {"id": "cmpl-stub", "object": "text_completion", "model": model}
    for i in range(n):
        for piece in _pieces(answer.content):
            if answer.chunk_delay_s:
                await asyncio.sleep(answer.chunk_delay_s)
            yield _sse({**base, "choices": [{"index": i, "text": piece, "finish_reason": None}]})
    if usage is not None:
        yield _sse({**base, "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"


# -- running it ------------------------------------------------------------------------


class ServerThread:
    """A uvicorn server for an ASGI app in a background thread (TCP port or Unix socket)."""

    def __init__(self, app: Any, *, port: int = 0, uds: str | None = None) -> None:
        import socket

        self.uds = uds
        self._sock: socket.socket | None = None
        if uds is None:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            # accepted connections inherit it; without it small responses wait ~40 ms
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock.bind(("127.0.0.1", port))
            self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(app, uds=uds, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        sockets = [self._sock] if self._sock is not None else None
        self.server.run(sockets=sockets)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(script: Path, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Run the stub in the foreground until interrupted."""
    stub = StubLLM(Script.load(script))
    uvicorn.run(stub.app, host=host, port=port, log_level="warning", lifespan="off")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rsiframe.gateway.stub", description=__doc__.split("\n")[0])
    ap.add_argument("--script", type=Path, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args(argv)
    serve(args.script, args.host, args.port)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
